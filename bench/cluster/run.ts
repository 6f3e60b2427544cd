/**
 * bench/cluster: the cluster's message plane against one broker and against NATS alone, in one run (issue 26,
 * docs/cluster.md "Capacity"):
 *   (a) three `nats-server -js` in a cluster (test/cluster/nats-cluster.ts) and three Switchyard brokers with the
 *       `Cluster` section on (R3 streams): MQTT publishers on broker A, subscribers on broker B;
 *   (b) one Switchyard broker, cluster off: publishers and subscribers on it;
 *   (c) the same traffic through the NATS cluster alone with nats.js: publishers on server n1, subscribers on n2;
 *       QoS 0 as core publish/subscribe, QoS 1 as a JetStream publish (R3 stream) with PubAck and a durable consumer
 *       with explicit acks (as bench/federation does on one server).
 * Per system and QoS: throughput (messages/s received while 4 publishers keep 200 QoS 1 messages in flight each, or
 * their socket buffers full at QoS 0), latency p50/p99 at a fixed 2 000 msg/s (bench/federation's scenarios), and the
 * CPU each process spent per message received during the throughput window: utime + stime from /proc/<pid>/stat
 * before and after, in µs per message. The bench's own process (the load generator) is not counted.
 * `BENCH_SECONDS` (default 3) is the length of each measured window; `BENCH_CLUSTER_ONLY=cluster,single,nats` runs
 * some of the systems only; `BENCH_CLUSTER_BROKERS` (2..5, default 3) sets the number of brokers (over the same
 * three nats-servers), for the per-node slope of docs/cluster.md "Capacity". `npm run bench` runs it; `tsx bench/cluster/run.ts` alone too. Not a test: the numbers
 * vary with the machine (and here two shared cores carry all seven processes and the load generator).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { latency, mqttSystem, natsJsSystem, spawnSwitchyard, throughput, until, type Qos, type System } from '../federation/run.js';
import { startNatsCluster, type NatsCluster } from '../../test/cluster/nats-cluster.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const PAIRS = 4;
/** Brokers in the cluster (2..5): A publishes, B subscribes, the others only take part. */
const BROKERS = Math.min(5, Math.max(2, Number(process.env.BENCH_CLUSTER_BROKERS ?? 3) || 3));
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/** A process whose CPU time is measured, by its role in the system. */
interface Proc {
  label: string;
  pid: number;
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat (fields 14 and 15). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // comm may hold spaces; fields from state on
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime (fields 14, 15 of the whole line)
}

export interface ClusterBenchRow {
  tput: Record<Qos, number>;
  lat: Record<Qos, { p50: number; p99: number; n: number }>;
  /** µs of CPU per message received, per process label, during the throughput window. */
  cpu: Record<Qos, Record<string, number>>;
}

// ----------------------------------------------------------------------------------------------------------------
// Switchyard brokers

/** A broker with authentication off and, with `cluster`, the `Cluster` section on (R3 streams). */
async function startBroker(tmp: string, tag: string, cluster?: { servers: string[]; nodeId: string }): Promise<{ port: number; rest: number; pid: number; stop: () => Promise<void> }> {
  const cfg = cluster && { enabled: true, servers: cluster.servers, clusterName: 'bench', nodeId: cluster.nodeId, replicas: 3 };
  // without `cluster` the repository's Cluster.yaml is left out (the cluster's brokers replace it)
  return spawnSwitchyard(tmp, tag, { 'Cluster.yaml': cfg ? JSON.stringify({ Cluster: cfg }) : undefined }); // JSON is YAML
}

/** A system under test: the processes whose CPU is measured, and a wait until a backlog is drained. */
interface Under {
  sys: System;
  procs: Proc[];
  /** Resolves once the system has delivered what it had taken (the cluster's stream backlog); default: 3 s. */
  settle?(): Promise<void>;
  /** What the system dropped so far, printed after its tables (the cluster: QoS 0 a node dropped while behind). */
  drops?(): Promise<string>;
}

/** Resolves once `read()` has not changed for 1 s (at most `maxMs`). */
async function quiet(read: () => Promise<number>, maxMs: number): Promise<void> {
  const end = Date.now() + maxMs;
  let last = await read();
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = await read();
    if (now === last) return;
    last = now;
  }
}

async function clusterSystem(tmp: string, nats: NatsCluster): Promise<Under> {
  const ids = 'abcde'.slice(0, BROKERS).split('');
  // each broker lists every NATS server, rotated so that their lists do not all start with n1
  const servers = (i: number) => [...nats.urls.slice(i % nats.urls.length), ...nats.urls.slice(0, i % nats.urls.length)];
  const started = await Promise.allSettled(ids.map((id, i) => startBroker(tmp, `sy-${id}`, { servers: servers(i), nodeId: id })));
  const brokers = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    for (const x of brokers) await x.stop(); // none left running when one did not start
    throw failed.reason;
  }
  const json = async (rest: number, path: string): Promise<Record<string, unknown> | undefined> => {
    const r = await fetch(`http://127.0.0.1:${rest}${path}`).catch(() => undefined);
    return r?.ok ? ((await r.json()) as Record<string, unknown>) : undefined;
  };
  for (const b of brokers) {
    await until(
      async () => {
        const v = (await json(b.rest, '/api/v1/server/cluster')) as { state?: string; nodes?: Array<{ state: string }> } | undefined;
        const link = (await json(b.rest, '/api/v1/server/integration/cluster/status')) as { state?: string } | undefined;
        return v?.state === 'Member' && v.nodes?.filter((n) => n.state === 'live').length === BROKERS && link?.state === 'Established';
      },
      60000,
      `${BROKERS} cluster members with their message link established`,
    );
  }
  const [a, b] = brokers as [(typeof brokers)[0], (typeof brokers)[0]];
  const sys = mqttSystem(`Switchyard x${BROKERS} cluster (A -> B)`, a.port, b.port, async () => {
    for (const x of brokers) await x.stop();
  });
  // the plane is up when a message published on A reaches B, at both QoS
  for (const qos of [0, 1] as const) {
    let got = 0;
    const unsub = await sys.subscribe(qos, () => `b${qos}/probe`, 1, () => got++);
    const pub = await sys.publisher(qos);
    await until(() => (pub.one(`b${qos}/probe`, Buffer.from('x')), got > 0), 30000, `cluster A -> B at QoS ${qos}`);
    pub.close();
    unsub();
  }
  const procs = [...brokers.map((x, i) => ({ label: `broker ${ids[i]!.toUpperCase()}`, pid: x.pid })), ...nats.nodes.map((n) => ({ label: `nats ${n.name}`, pid: n.proc!.pid! }))];
  // every node pulls every message from the stream: wait until the others have published what A pushed
  const published = async (): Promise<number> => {
    let sum = 0;
    for (const x of brokers.slice(1)) {
      const text = await (await fetch(`http://127.0.0.1:${x.rest}/metrics`)).text();
      sum += Number(/^switchyard_messages_published_total (\S+)$/m.exec(text)?.[1] ?? 0);
    }
    return sum;
  };
  // QoS 0 crosses nodes at most once: a node that is behind drops it (docs/cluster.md), counted per node
  const drops = async (): Promise<string> => {
    const per = await Promise.all(
      brokers.map(async (x, i) => `${ids[i]!.toUpperCase()} ${((await json(x.rest, '/api/v1/server/integration/cluster/status')) as { qos0Dropped?: number } | undefined)?.qos0Dropped ?? 'n/a'}`),
    );
    return `QoS 0 messages dropped by the nodes while behind (cluster link qos0Dropped, whole run): ${per.join(', ')}`;
  };
  return { sys, procs, settle: () => quiet(published, 120000), drops };
}

async function singleSystem(tmp: string): Promise<Under> {
  const b = await startBroker(tmp, 'sy-single');
  return { sys: mqttSystem('Switchyard x1 (cluster off)', b.port, b.port, b.stop), procs: [{ label: 'broker', pid: b.pid }] };
}

// ----------------------------------------------------------------------------------------------------------------
// The NATS cluster alone (nats.js): publishers on n1, subscribers on n2

async function natsSystem(nats: NatsCluster): Promise<Under> {
  const conns: NatsConnection[] = [];
  const conn = (server: string) => async () => {
    const nc = await natsConnect({ servers: server });
    conns.push(nc);
    return nc;
  };
  const [n1, n2] = nats.urls as [string, string];
  const jsm = await jetstreamManager(await conn(n1)());
  await jsm.streams.add({ name: 'BENCH_CLUSTER', subjects: ['b1.>'], storage: StorageType.File, num_replicas: 3 });
  const sys = natsJsSystem('NATS x3 alone (n1 -> n2, nats.js)', 'BENCH_CLUSTER', jsm, conn(n1), conn(n2), async () => {
    await jsm.streams.delete('BENCH_CLUSTER').catch(() => undefined);
    for (const nc of conns) await nc.close().catch(() => undefined);
  });
  return { sys, procs: nats.nodes.map((n) => ({ label: `nats ${n.name}`, pid: n.proc!.pid! })) };
}

// ----------------------------------------------------------------------------------------------------------------
// The throughput scenario with CPU per message

async function throughputCpu(sys: System, procs: Proc[], qos: Qos): Promise<{ rate: number; cpu: Record<string, number> }> {
  const cpu: Record<string, number> = {};
  const rate = await throughput(sys, qos, () => {
    const cpu0 = procs.map((p) => cpuSeconds(p.pid));
    return (n) => {
      const cpu1 = procs.map((p) => cpuSeconds(p.pid));
      procs.forEach((p, i) => (cpu[p.label] = n > 0 ? ((cpu1[i]! - cpu0[i]!) * 1e6) / n : NaN));
    };
  });
  return { rate, cpu };
}

/** Runs the three systems, prints the tables and returns the figures per system (by its printed name). */
export async function runClusterBench(): Promise<Array<[string, ClusterBenchRow]>> {
  const load = loadavg().map((x) => x.toFixed(2)).join(' ');
  const tmp = mkdtempSync(join(tmpdir(), 'switchyard-clusterbench-'));
  const results: Array<[string, ClusterBenchRow]> = [];
  const notes: string[] = [];
  const only = process.env.BENCH_CLUSTER_ONLY?.split(',');
  const wants = (label: string) => !only || only.includes(label);
  let nats: NatsCluster | undefined;
  try {
    if (wants('cluster') || wants('nats')) nats = await startNatsCluster(3, `sy-bench-${process.pid}`);
    const starters: Array<[string, () => Promise<Under>]> = [
      ['single', () => singleSystem(tmp)],
      ['nats', () => natsSystem(nats!)],
      ['cluster', () => clusterSystem(tmp, nats!)],
    ];
    for (const [label, start] of starters) {
      if (!wants(label)) continue;
      process.stdout.write(`bench/cluster: ${label} ...`);
      const { sys, procs, settle = () => new Promise<void>((r) => setTimeout(r, 3000)), drops } = await start();
      try {
        const row: ClusterBenchRow = { tput: { 0: 0, 1: 0 }, lat: { 0: { p50: NaN, p99: NaN, n: 0 }, 1: { p50: NaN, p99: NaN, n: 0 } }, cpu: { 0: {}, 1: {} } };
        for (const qos of [0, 1] as const) {
          process.stdout.write(` lat${qos}`);
          row.lat[qos] = await latency(sys, qos);
          await settle();
        }
        // QoS 1 first: a QoS 0 flood leaves the larger backlog (in the cluster, every message goes through the stream)
        for (const qos of [1, 0] as const) {
          process.stdout.write(` qos${qos}`);
          const t = await throughputCpu(sys, procs, qos);
          row.tput[qos] = t.rate;
          row.cpu[qos] = t.cpu;
          await settle(); // let a backlog drain before the next scenario
        }
        results.push([sys.name, row]);
        if (drops) notes.push(`${sys.name}: ${await drops()}`);
      } finally {
        await sys.stop();
      }
      process.stdout.write(' done\n');
    }
  } finally {
    await nats?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  }
  printTables(results, load);
  for (const n of notes) process.stdout.write(`${n}\n`);
  return results;
}

function printTables(results: Array<[string, ClusterBenchRow]>, load: string): void {
  const f = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : 'n/a');
  const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : 'n/a');
  const table = (head: string[], rows: string[][]) => {
    const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ');
    process.stdout.write(`${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('-|-')}\n`);
    for (const r of rows) process.stdout.write(`${line(r)}\n`);
  };
  process.stdout.write(`\nbench/cluster: ${PAIRS} publisher->subscriber pairs, 64-byte payloads, ${DURATION / 1000} s windows; latency at 2000 msg/s; load average at start ${load}\n`);
  table(
    ['system', 'QoS 0 msg/s', 'QoS 0 p50/p99 ms', 'QoS 1 msg/s', 'QoS 1 p50/p99 ms'],
    results.map(([name, r]) => [name, f(r.tput[0]), `${ms(r.lat[0].p50)} / ${ms(r.lat[0].p99)}`, f(r.tput[1]), `${ms(r.lat[1].p50)} / ${ms(r.lat[1].p99)}`]),
  );
  process.stdout.write('\nCPU per message received (µs, utime+stime from /proc/<pid>/stat over the throughput window)\n');
  const rows: string[][] = [];
  for (const [name, r] of results) {
    for (const qos of [0, 1] as const) {
      const parts = Object.entries(r.cpu[qos]).map(([label, us]) => `${label} ${Number.isFinite(us) ? us.toFixed(1) : 'n/a'}`);
      const total = Object.values(r.cpu[qos]).reduce((s, x) => s + (Number.isFinite(x) ? x : 0), 0);
      rows.push([name, String(qos), total.toFixed(1), parts.join(', ')]);
    }
  }
  table(['system', 'QoS', 'all processes', 'per process'], rows);
}

if (import.meta.url === `file://${process.argv[1]}`) await runClusterBench();
