/**
 * Try the LoRa radio support without hardware (docs/devices.md "Trying it without hardware"):
 *
 *   npx tsx scripts/lora-sim.ts [dir] [--node 7] [--every 5]
 *
 * starts `socat` with a pseudo-terminal pair (<dir>/radio for the broker, <dir>/sim for the modem; dir defaults to
 * /tmp/switchyard-lora), runs the simulated Microchip RN2483 of the tests (test/lora/rn2483-sim.ts: the documented
 * UART commands and answers) on the modem's end, and plays one node on the air: every few seconds the node sends a
 * RadioHead-framed uplink `{"node":7,"seq":N,"temperature":...}` to radio address 1. Every downlink the broker
 * transmits is printed with its header. Point a LoRaDeviceManager radio at <dir>/radio (the script prints the YAML).
 * Needs socat and the dev dependencies (tsx); Ctrl-C stops it and socat (by its pid).
 */
import { mkdirSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { PtyPair, Rn2483Sim } from '../test/lora/rn2483-sim.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { node: { type: 'string', default: '7' }, every: { type: 'string', default: '5' } } });
const dir = positionals[0] ?? '/tmp/switchyard-lora';
const node = Number(values.node);
const everyMs = Number(values.every) * 1000;
if (!Number.isInteger(node) || node < 0 || node > 254 || !(everyMs >= 100)) {
  process.stderr.write('usage: npx tsx scripts/lora-sim.ts [dir] [--node 0..254] [--every seconds]\n');
  process.exit(2);
}
mkdirSync(dir, { recursive: true });
const pty = new PtyPair(dir);
await pty.start();
const sim = await Rn2483Sim.open(pty.sim);
process.stdout.write(`simulated RN2483 on ${pty.sim}; the broker's end is ${pty.radio}. For example, config/LoRa.yaml:

LoRaDeviceManager:
  data:
    - name: gateway
      type: loraSerial
      serialConfig: { port: ${pty.radio} }
      address: 1

then: mosquitto_sub -u admin -P "$PW" -t 'lora/gateway/#' -v      (uplinks on lora/gateway/${node}/up)
      mosquitto_pub -u admin -P "$PW" -t lora/gateway/${node}/down -m hello   (printed here as a downlink)
`);

let seq = 0;
const timer = setInterval(() => {
  const payload = Buffer.from(JSON.stringify({ node, seq, temperature: Math.round((20 + 5 * Math.sin(seq / 5)) * 10) / 10 }));
  const frame = Buffer.concat([Buffer.from([1, node, seq % 256, 0]), payload]); // to, from, id, flags (RadioHead RH_RF95)
  const n = seq++;
  void sim.inject(frame, -60 - (n % 20), 9).then(() => process.stdout.write(`uplink ${n} from node ${node} delivered to the radio\n`));
}, everyMs);

let shown = 0;
const poll = setInterval(() => {
  for (; shown < sim.transmissions.length; shown++) {
    const t = sim.transmissions[shown]!;
    process.stdout.write(`downlink to node ${t[0]} from ${t[1]} id ${t[2]} flags 0x${t[3]!.toString(16)}: ${JSON.stringify(t.subarray(4).toString('utf8'))}\n`);
  }
}, 200);

const stop = async () => {
  clearInterval(timer);
  clearInterval(poll);
  await sim.close();
  await pty.stop();
  process.exit(0);
};
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());
