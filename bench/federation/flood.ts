/**
 * bench/federation/flood.ts: where the CPU of a federated QoS 1 flood goes. Two Switchyard brokers linked through
 * one nats-server as in bench/federation/run.ts, 4 publishers on A keeping 200 QoS 1 messages in flight each, 4
 * subscribers on B; after 1.5 s of warm-up it measures for `SECS` seconds (default 5) the rate received on B and the
 * CPU time of each process (broker A, broker B, nats-server, this load generator) as a share of one core and in µs
 * per message. Not a test and not part of `npm run bench`: a diagnostic (`npx tsx bench/federation/flood.ts`;
 * `Q=0` for QoS 0; `BENCH_LINK_GLOBAL` and `BENCH_NODE_FLAGS` as in run.ts, e.g. `--cpu-prof` to profile both brokers).
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSwitchyard } from './run.js';
import { LoadClient, publishPacket } from '../mqtt/loadgen.js';
import { startNats } from '../../test/federation/nats-server.js';
const qos = Number(process.env.Q ?? 1) as 0|1;
const tmp = mkdtempSync(join(tmpdir(), 'flood-'));
const nats = await startNats();
const b = await startSwitchyard(tmp, 'b', nats.url, 'pull');
const a = await startSwitchyard(tmp, 'a', nats.url, 'push');
const ns = qos ? 'b1' : 'b0';
const cpu = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' '); return (Number(f[11]) + Number(f[12])) * 10; };
let received = 0;
const subs: LoadClient[] = [], pubs: LoadClient[] = [];
for (let i = 0; i < 4; i++) { const s = await LoadClient.connect(b.port, 'fs' + i); s.onPublish = () => received++; await s.subscribe(`${ns}/tp/${i}`, qos); subs.push(s); }
const payload = Buffer.alloc(64, 'x');
for (let i = 0; i < 4; i++) {
  const p = await LoadClient.connect(a.port, 'fp' + i); pubs.push(p);
  let pid = 0, inflight = 0; const nextPid = () => (pid = pid === 65535 ? 1 : pid + 1);
  const send = (k: number) => { const bufs = []; for (let j = 0; j < k; j++) bufs.push(publishPacket(`${ns}/tp/${i}`, payload, 1, nextPid())); inflight += k; p.socket.write(Buffer.concat(bufs)); };
  p.onAck(() => { inflight--; if (inflight < 100 && !p.stopped) send(200 - inflight); });
  send(200);
}
await new Promise(r => setTimeout(r, 1500));
const pids = { A: a.pid, B: b.pid, nats: nats.pid()!, bench: process.pid };
const c0 = Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, cpu(p)]));
const r0 = received, t0 = performance.now();
// TRACE=1: messages received per 250 ms / A's outbox depth (stalls show as near-zero slots)
let last = received;
const trace = process.env.TRACE
  ? setInterval(() => {
      const n = received - last;
      last = received;
      void fetch(`http://127.0.0.1:${a.rest}/api/v1/server/integration/fed/status`).then((r) => r.json()).then((st: { outbox?: number }) => process.stdout.write(`${n}/${st.outbox} `), () => undefined);
    }, 250)
  : undefined;
await new Promise(r => setTimeout(r, Number(process.env.SECS ?? 5) * 1000));
const dt = (performance.now() - t0) / 1000;
if (trace) { clearInterval(trace); process.stdout.write('\n'); }
const rate = (received - r0) / dt;
console.log('rate', Math.round(rate), Object.entries(pids).map(([k, p]) => `${k} ${((cpu(p) - c0[k]!) / dt / 10).toFixed(0)}%`).join(' '), 'us/msg:', Object.entries(pids).map(([k, p]) => `${k} ${((cpu(p) - c0[k]!) * 1000 / (received - r0)).toFixed(1)}`).join(' '));
pubs.forEach(p => p.close()); subs.forEach(s => s.close()); await a.stop(); await b.stop(); await nats.dispose();
