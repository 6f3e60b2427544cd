import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { AnyActorRef } from 'xstate';
import { stateString, virtualKindOfRef, type VirtualDirectory } from './inspector.js';
import { SUPERVISORS, type Runtime } from './runtime.js';
import type { VirtualActorKind } from './virtual-actors.js';

/**
 * Every GET view of the server is a pure function of live state here (NATS `Connz` style); routes only adapt.
 */

export type SubsystemState = 'OK' | 'STOPPED' | 'PAUSED' | 'DISABLED' | 'WARN' | 'ERROR';
export interface SubSystemStatus {
  name: string;
  comment: string;
  status: SubsystemState;
}

interface SnapshotLike {
  value: unknown;
  status: string;
  context?: Record<string, unknown>;
  children?: Record<string, AnyActorRef | undefined>;
  hasTag?: (tag: string) => boolean;
  tags?: Set<string>;
  error?: unknown;
}

function snap(ref: AnyActorRef): SnapshotLike {
  return ref.getSnapshot() as SnapshotLike;
}


function title(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

function isSupervisor(ref: AnyActorRef): boolean {
  return (ref as unknown as { logic?: { id?: string } }).logic?.id === 'supervisor';
}

/**
 * Worst of a supervisor's own state and its children's: failed tag → ERROR; degraded tag, crashed child or pending
 * restart → WARN. Shard supervisors (of a sharded supervisor) are looked through, so their children count directly.
 * Only live children are visited: the actors of a virtual kind (`virtual`) are counted from the engine, and a
 * passive one is at rest by definition (a troubled one, e.g. above high-water, is activated).
 */
export function supervisorStatus(name: string, ref: AnyActorRef | undefined, virtual?: VirtualActorKind): SubSystemStatus {
  if (!ref) return { name: title(name), comment: 'not running', status: 'STOPPED' };
  const failures: string[] = [];
  const troubled: string[] = [];
  let count = 0;
  const lastErrors: string[] = [];
  const visit = (sup: AnyActorRef) => {
    const s = snap(sup);
    const ctx = (s.context ?? {}) as { lastError?: string; pending?: string[] };
    if (s.hasTag?.('failed')) {
      failures.push(ctx.lastError ?? 'failed');
      return;
    }
    if (ctx.lastError) lastErrors.push(ctx.lastError);
    for (const [id, child] of Object.entries(s.children ?? {})) {
      if (!child) continue;
      if (isSupervisor(child)) {
        visit(child);
        continue;
      }
      count++;
      const cs = snap(child);
      if (cs.status === 'error' || cs.hasTag?.('failed') || cs.hasTag?.('degraded')) troubled.push(`${id} ${stateString(cs.value) || cs.status}`);
    }
    for (const id of ctx.pending ?? []) troubled.push(`${id} restarting`);
  };
  visit(ref);
  if (failures.length) return { name: title(name), comment: failures.join('; '), status: 'ERROR' };
  if (troubled.length) {
    const shown = troubled.length > 10 ? [...troubled.slice(0, 10), `and ${troubled.length - 10} more`] : troubled;
    return { name: title(name), comment: `${shown.join('; ')}${lastErrors.length ? ` (last crash: ${lastErrors[lastErrors.length - 1]})` : ''}`, status: 'WARN' };
  }
  if (virtual !== undefined) return { name: title(name), comment: `${virtual.count() + count - virtual.activeCount()} running (${virtual.activeCount()} active)`, status: 'OK' };
  return { name: title(name), comment: `${count} running`, status: 'OK' };
}

export function subsystemStatus(rt: Runtime, extra: SubSystemStatus[] = []): SubSystemStatus[] {
  const list: SubSystemStatus[] = [];
  const state = rt.state;
  const failed = rt.failedSubtrees();
  const given = failed.filter((f) => f.state === 'failed').map((f) => f.subtree);
  list.push({
    name: 'Server',
    comment: state === 'degraded' ? `degraded: gave up restarting ${given.join(', ')} (its own restart budget is spent); PATCH /api/v1/server {"state":"restart"} resets them` : state,
    status: state === 'running' ? 'OK' : state === 'failed' || state === 'degraded' ? 'ERROR' : state === 'stopped' ? 'STOPPED' : 'WARN',
  });
  list.push({ name: 'Store', comment: `LevelDB ${rt.store.status}`, status: rt.store.status === 'open' ? 'OK' : 'ERROR' });
  for (const name of SUPERVISORS) {
    const st = supervisorStatus(name, rt.supervisor(name), rt.virtualKindOf(name));
    const f = failed.find((x) => x.subtree === name);
    if (f && st.status === 'ERROR') {
      st.comment += f.state === 'restarting' ? `; failed subtree ${name}: the server restarts it (attempt ${f.attempt})` : `; failed subtree ${name}: the server gave up (degraded)`;
    }
    list.push(st);
  }
  // the discovery manager's own line (MAPS: OK, WARN "No bound networks: …", STOPPED or DISABLED)
  const discovery = rt.service('discovery');
  if (discovery) list.push(discovery.subsystemStatus());
  // the cluster's line when Cluster.enabled (membership state, unreachable nodes)
  const cluster = rt.service('cluster')?.subsystemStatus();
  if (cluster) list.push(cluster);
  return [...list, ...extra];
}

export type Health = 'Ok' | 'Warning' | 'Error';
export function healthOf(list: SubSystemStatus[]): { status: Health; issueCount: number } {
  let errors = 0;
  let warnings = 0;
  for (const s of list) {
    if (s.status === 'ERROR') errors++;
    else if (s.status === 'WARN') warnings++;
  }
  return { status: errors ? 'Error' : warnings ? 'Warning' : 'Ok', issueCount: errors + warnings };
}

export interface ActorNode {
  id: string;
  machine: string;
  state: unknown;
  status: string;
  tags: string[];
  context: Record<string, unknown>;
  childCount?: number;
  children: ActorNode[];
}

/** Only small scalar context values are shown (no functions, no logic objects, no large arrays). */
function smallContext(ctx: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(ctx ?? {})) {
    if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) {
      if (typeof v === 'string' && v.length > 200) out[k] = v.slice(0, 200) + '…';
      else out[k] = v;
    } else if (Array.isArray(v) && v.length <= 20 && v.every((x) => ['string', 'number', 'boolean'].includes(typeof x))) out[k] = v;
  }
  return out;
}

/**
 * The tree from `ref` down; at most `limit` children per node (`childCount` counts them all). Under the supervisor
 * of a virtual kind, the passive actors follow the live children as nodes built from their engine records
 * (status `passive`).
 */
export function actorTree(ref: AnyActorRef, id = 'server', limit = Infinity, dir?: VirtualDirectory): ActorNode {
  const s = snap(ref);
  const logic = (ref as unknown as { logic?: { id?: string; config?: { id?: string } } }).logic;
  const kids = Object.entries(s.children ?? {}).filter(([, c]) => c);
  const children = kids.slice(0, limit).map(([cid, c]) => actorTree(c!, cid, limit, dir));
  let childCount = kids.length;
  const virtual = virtualKindOfRef(ref, dir);
  if (virtual !== undefined) {
    childCount += Math.max(0, virtual.count() - virtual.activeCount());
    for (const name of virtual.names()) {
      if (children.length >= limit) break;
      if (virtual.live(name) !== undefined) continue;
      const view = virtual.view(name);
      if (view === undefined) continue;
      children.push({ id: `${virtual.kind}:${name}`, machine: virtual.machine, state: view.value, status: 'passive', tags: view.tags, context: view.context, childCount: 0, children: [] });
    }
  }
  return {
    id,
    machine: logic?.id ?? logic?.config?.id ?? 'actor',
    state: s.value ?? null,
    status: s.status,
    tags: s.tags ? [...s.tags] : [],
    context: smallContext(s.context),
    childCount,
    children,
  };
}

function dirSize(dir: string): number {
  let total = 0;
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) total += dirSize(p);
      else if (e.isFile()) total += statSync(p).size;
    }
  } catch {
    /* vanished while reading */
  }
  return total;
}

function threadCount(): number {
  try {
    const m = /^Threads:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]);
  } catch {
    /* not Linux */
  }
  return 1 + Number(process.env.UV_THREADPOOL_SIZE ?? 4);
}

let lastCpu = { at: process.hrtime.bigint(), usage: process.cpuUsage() };
function cpuPercent(): number {
  const now = process.hrtime.bigint();
  const usage = process.cpuUsage();
  const elapsedUs = Number(now - lastCpu.at) / 1000;
  const usedUs = usage.user - lastCpu.usage.user + (usage.system - lastCpu.usage.system);
  lastCpu = { at: now, usage };
  return elapsedUs > 0 ? Math.round((usedUs / elapsedUs) * 10000) / 100 : 0;
}

export interface ServerInfo {
  serverName: string;
  version: string;
  buildDate: string;
  totalMemory: number;
  maxMemory: number;
  freeMemory: number;
  numberOfThreads: number;
  timeToCreateNano: number;
  uptime: number;
  connections: number;
  destinations: number;
  cpuTime: number;
  cpuPercent: number;
  storageSize: number;
  threadState: Record<string, number>;
}

/** package.json: two levels up from src/runtime, three from the compiled dist/src/runtime. */
const PACKAGE_JSON = [new URL('../../package.json', import.meta.url), new URL('../../../package.json', import.meta.url)].find((u) => {
  try {
    return statSync(u).isFile();
  } catch {
    return false;
  }
})!;
export const VERSION = JSON.parse(readFileSync(PACKAGE_JSON, 'utf8')).version as string;
export const BUILD_DATE = (() => {
  try {
    return statSync(PACKAGE_JSON).mtime.toISOString().slice(0, 10);
  } catch {
    return new Date().toISOString().slice(0, 10);
  }
})();

/** ServerInfoDTO: memory in bytes (V8 heap), uptime and cpuTime in ms and ns, storage in bytes. */
export async function serverInfo(rt: Runtime, destinations: number): Promise<ServerInfo> {
  const { getHeapStatistics } = await import('node:v8');
  const mem = process.memoryUsage();
  const heap = getHeapStatistics();
  const cpu = process.cpuUsage();
  const threads = threadCount();
  return {
    serverName: rt.serverName,
    version: VERSION,
    buildDate: BUILD_DATE,
    totalMemory: mem.heapTotal,
    maxMemory: heap.heap_size_limit,
    freeMemory: Math.max(0, mem.heapTotal - mem.heapUsed),
    numberOfThreads: threads,
    timeToCreateNano: rt.bootDurationNs,
    uptime: Date.now() - rt.startedAt,
    connections: rt.network.currentConnections,
    destinations,
    cpuTime: (cpu.user + cpu.system) * 1000,
    cpuPercent: cpuPercent(),
    storageSize: dirSize(rt.store.dir),
    threadState: { RUNNABLE: 1, WAITING: Math.max(0, threads - 1) },
  };
}

/** ServerStatisticsDTO from the engine's counters and the network counters. */
export function serverStats(rt: Runtime) {
  const e = rt.engineStats();
  const n = rt.network;
  const metrics: Record<string, { name: string; unitName: string; timeSpan: number; current: number; stats: Record<string, number> }> = {};
  const add = (name: string, unitName: string, current: number) => {
    metrics[name] = { name, unitName, timeSpan: 0, current, stats: {} };
  };
  add('Published Messages', 'msg/s', e.publishedPerSecond);
  add('Delivered Messages', 'msg/s', e.deliveredPerSecond);
  add('Connections', 'connections', n.currentConnections);
  return {
    packetsSent: n.packetsSent,
    packetsReceived: n.packetsReceived,
    totalReadBytes: n.totalReadBytes,
    totalWriteBytes: n.totalWriteBytes,
    totalConnections: n.totalConnections,
    totalDisconnections: n.totalDisconnections,
    totalNoInterestMessages: e.totalNoInterestMessages,
    totalSubscribedMessages: e.totalSubscribedMessages,
    totalPublishedMessages: e.totalPublishedMessages,
    totalRetrievedMessages: e.totalRetrievedMessages,
    totalExpiredMessages: e.totalExpiredMessages,
    totalDeliveredMessages: e.totalDeliveredMessages,
    publishedPerSecond: e.publishedPerSecond,
    subscribedPerSecond: e.subscribedPerSecond,
    noInterestPerSecond: e.noInterestPerSecond,
    deliveredPerSecond: e.deliveredPerSecond,
    retrievedPerSecond: e.retrievedPerSecond,
    stats: JSON.stringify(metrics),
  };
}
