/**
 * The one summary table `npm run bench` ends with (issue 25 item 6): per scenario, each peer's figure, Switchyard's,
 * and Switchyard against the best peer. For throughput the ratio is Switchyard / best peer (higher is better); for
 * latency and memory it is best peer / Switchyard, so that above 1.00× always means Switchyard is ahead. The targets
 * are the issue's. A scenario whose bench did not run (BENCH_MQTT_BROKERS, BENCH_FEDERATION_ONLY, ...) shows '—'.
 */
import type { ClusterBenchRow } from './cluster/run.js';
import type { FederationRow } from './federation/run.js';
import type { MqttRow } from './mqtt/run.js';

export interface SummaryInput {
  mqtt?: Record<string, MqttRow>;
  federation?: Array<[string, FederationRow]>;
  cluster?: Array<[string, ClusterBenchRow]>;
  rest?: { broker: number; bare: number };
  sse?: { deliveries: number; offered: number };
}

const PEERS = ['Mosquitto', 'Aedes', 'NATS', 'bare Fastify'] as const;
type Peer = (typeof PEERS)[number];

interface Line {
  scenario: string;
  peers: Partial<Record<Peer, number>>;
  switchyard: number;
  /** true: higher is better (throughput); false: lower is better (latency, memory). */
  higher: boolean;
  show: (x: number) => string;
  target: string;
}

const num = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');
const kib = (x: number) => (Number.isFinite(x) ? (x / 1024).toFixed(2) : '—');

export function summaryLines(input: SummaryInput): Line[] {
  const lines: Line[] = [];
  const m = input.mqtt;
  if (m) {
    const of = (f: (r: MqttRow) => number): Partial<Record<Peer, number>> => ({
      Mosquitto: m.Mosquitto ? f(m.Mosquitto) : NaN,
      Aedes: m.Aedes ? f(m.Aedes) : NaN,
      NATS: m.NATS ? f(m.NATS) : NaN,
    });
    const sy = (f: (r: MqttRow) => number) => (m.Switchyard ? f(m.Switchyard) : NaN);
    const add = (scenario: string, f: (r: MqttRow) => number, higher: boolean, show: (x: number) => string, target: string) =>
      lines.push({ scenario, peers: of(f), switchyard: sy(f), higher, show, target });
    add('MQTT QoS 0 pairs, distinct topics (msg/s)', (r) => r.qos0, true, num, '≥ 1.0× NATS');
    add('MQTT QoS 1 pairs (msg/s)', (r) => r.qos1, true, num, '≥ 1.5×');
    add('MQTT fan-out QoS 0 1→100 (deliveries/s)', (r) => r.fanout, true, num, '≥ 2×');
    add('MQTT fan-out QoS 1 1→100 (deliveries/s)', (r) => r.fanout1, true, num, '≥ 3×');
    add('MQTT p99 at 5 000 msg/s QoS 0 (ms)', (r) => r.p99, false, ms, 'lowest');
    add('MQTT p99 at 20 000 msg/s QoS 0 (ms)', (r) => r.p99at20k, false, ms, 'lowest');
    add('MQTT p99 at 5 000 msg/s QoS 1 (ms)', (r) => r.p99q1, false, ms, 'lowest');
    add('MQTT p99 at 20 000 msg/s QoS 1 (ms)', (r) => r.p99q1at20k, false, ms, 'lowest');
    add('MQTT RSS per idle connection, no GC (KiB)', (r) => r.memRaw, false, kib, '≤ 4 KB');
    add('MQTT RSS per idle connection, after full GC (KiB)', (r) => r.memPerConn, false, kib, '≤ 3 KB');
  }
  const fed = input.federation;
  if (fed) {
    const find = (prefix: string) => fed.find(([n]) => n.startsWith(prefix))?.[1];
    const sy = find('Switchyard');
    const mq = find('Mosquitto');
    const nats = find('NATS');
    lines.push({ scenario: 'Federation QoS 1 A→B (msg/s; Mosquitto bridge)', peers: { Mosquitto: mq?.tput[1] ?? NaN }, switchyard: sy?.tput[1] ?? NaN, higher: true, show: num, target: '≥ 1.0× bridge' });
    lines.push({ scenario: 'Federation QoS 0 A→B (msg/s; Mosquitto bridge, NATS alone)', peers: { Mosquitto: mq?.tput[0] ?? NaN, NATS: nats?.tput[0] ?? NaN }, switchyard: sy?.tput[0] ?? NaN, higher: true, show: num, target: '—' });
    lines.push({ scenario: 'Federation QoS 1 p99 at 2 000 msg/s (ms; NATS alone)', peers: { Mosquitto: mq?.lat[1].p99 ?? NaN, NATS: nats?.lat[1].p99 ?? NaN }, switchyard: sy?.lat[1].p99 ?? NaN, higher: false, show: ms, target: '≤ 2× NATS' });
  }
  const cl = input.cluster;
  if (cl) {
    const sy = cl.find(([n]) => n.includes('cluster (A'))?.[1];
    const nats = cl.find(([n]) => n.startsWith('NATS'))?.[1];
    lines.push({ scenario: 'Cluster QoS 0 broker A→B of 3 (msg/s; NATS x3 alone n1→n2)', peers: { NATS: nats?.tput[0] ?? NaN }, switchyard: sy?.tput[0] ?? NaN, higher: true, show: num, target: 'reported' });
    lines.push({ scenario: 'Cluster QoS 1 broker A→B of 3 (msg/s; NATS x3 alone n1→n2)', peers: { NATS: nats?.tput[1] ?? NaN }, switchyard: sy?.tput[1] ?? NaN, higher: true, show: num, target: 'reported' });
    lines.push({ scenario: 'Cluster QoS 1 p99 at 2 000 msg/s (ms; NATS x3 alone)', peers: { NATS: nats?.lat[1].p99 ?? NaN }, switchyard: sy?.lat[1].p99 ?? NaN, higher: false, show: ms, target: 'reported' });
  }
  if (input.rest) {
    lines.push({ scenario: 'REST POST /messaging/publish (req/s; bare Fastify route)', peers: { 'bare Fastify': input.rest.bare }, switchyard: input.rest.broker, higher: true, show: num, target: '≥ 0.8×' });
  }
  if (input.sse) {
    lines.push({ scenario: `SSE fan-out 1→1 000 (events/s received of ${num(input.sse.offered)} asked)`, peers: {}, switchyard: input.sse.deliveries, higher: true, show: num, target: 'reported' });
  }
  return lines;
}

/** The table as printed (markdown, so it can go into a closing note as is). */
export function formatSummary(input: SummaryInput): string {
  const rows = summaryLines(input).map((l) => {
    const peerValues = PEERS.map((p) => l.peers[p]).filter((x): x is number => x !== undefined && Number.isFinite(x));
    const best = peerValues.length === 0 ? NaN : l.higher ? Math.max(...peerValues) : Math.min(...peerValues);
    const ratio = l.higher ? l.switchyard / best : best / l.switchyard;
    return [l.scenario, ...PEERS.map((p) => (l.peers[p] === undefined ? '' : l.show(l.peers[p]!))), l.show(l.switchyard), Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : '—', l.target];
  });
  const head = ['scenario', ...PEERS, 'Switchyard', 'vs best peer', 'target'];
  return [
    '',
    'Summary (vs best peer: above 1.00× means Switchyard is ahead; throughput Switchyard / best, latency and memory best / Switchyard)',
    '',
    `| ${head.join(' | ')} |`,
    `|---|${head.slice(1).map(() => '---:').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
    '',
  ].join('\n');
}
