import { serverStats } from '../runtime/monitor.js';
import type { Engine } from '../engine/index.js';
import { VERSION, serverInfo } from '../runtime/monitor.js';
import type { EndpointsService } from '../endpoints/endpoints.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { MessagingService } from './messaging.service.js';

/**
 * `$SYS` topics (reference section 12): every `MessageDaemon.systemTopicInterval` ms the server publishes its
 * figures as retained messages into the engine, so MQTT, REST and SSE subscribers of `$SYS/#` all get them. A topic
 * is published only when its payload changed (and once at boot). The engine keeps `$SYS` retained messages in memory
 * only (src/engine/engine.ts); they are regenerated here at every boot.
 *
 * Payloads are UTF-8 strings: numbers in decimal, `$SYS/broker/time` ISO-8601, `$SYS/broker/uptime` whole seconds,
 * `$SYS/server/*` JSON. Switches: `enableSystemTopics` (all), `enableSystemStatusTopics` (the `$SYS/server/*` JSON),
 * `enableSystemTopicAverages` (the `/1`, `/5`, `/10`, `/15` children).
 *
 * Averages are exponentially weighted like Unix load averages (weight e^(-interval/window) per sample, windows of 1,
 * 5, 10 and 15 minutes). For a counter (a running total) the averaged quantity is its rate per second over the last
 * interval; for a gauge (connected clients, stored messages ...) it is the value itself. Averages are shown with two
 * decimals.
 */

/** A counter is a running total (averaged as a per-second rate); a gauge a current level (averaged as such). */
type Kind = 'text' | 'counter' | 'gauge';

interface Figures {
  now: number;
  uptimeSeconds: number;
  subscriptions: number;
  connected: number;
  peakConnections: number;
  totalConnections: number;
  totalDisconnections: number;
  expiredSessions: number;
  bytesReceived: number;
  bytesSent: number;
  packetsReceived: number;
  packetsSent: number;
  messagesReceived: number;
  messagesSent: number;
  inflight: number;
  stored: number;
  retained: number;
  dropped: number;
}

interface TopicDef {
  topic: string;
  aliases: string[];
  kind: Kind;
  averaged: boolean;
  value: (f: Figures) => string | number;
}

const t = (topic: string, aliases: string[], kind: Kind, averaged: boolean, value: (f: Figures) => string | number): TopicDef => ({
  topic,
  aliases,
  kind,
  averaged,
  value,
});

/** Primary topics and aliases of reference section 12, with the figure each carries. */
export const SYS_TOPICS: readonly TopicDef[] = [
  t('$SYS/broker/version', [], 'text', false, () => VERSION),
  t('$SYS/broker/uptime', [], 'text', false, (f) => f.uptimeSeconds),
  t('$SYS/broker/time', ['$SYS/broker/timestamp'], 'text', false, (f) => new Date(f.now).toISOString()),
  t('$SYS/broker/clients/maximum', ['$SYS/clients/maximum'], 'gauge', false, (f) => f.peakConnections),
  t('$SYS/broker/subscriptions/count', ['$SYS/subscriptions/count'], 'gauge', true, (f) => f.subscriptions),
  t(
    '$SYS/broker/clients/connected',
    ['$SYS/broker/clients/active', '$SYS/clients/connected', '$SYS/load/connected'],
    'gauge',
    true,
    (f) => f.connected,
  ),
  t('$SYS/broker/clients/disconnected', ['$SYS/clients/disconnected', '$SYS/broker/clients/inactive'], 'counter', true, (f) => f.totalDisconnections),
  t('$SYS/broker/clients/expired', ['$SYS/clients/expired'], 'counter', true, (f) => f.expiredSessions),
  t('$SYS/broker/clients/total', ['$SYS/clients/total'], 'counter', true, (f) => f.totalConnections),
  t(
    '$SYS/broker/load/bytes/received',
    ['$SYS/broker/bytes/received', '$SYS/bytes/received', '$SYS/load/bytes/received'],
    'counter',
    true,
    (f) => f.bytesReceived,
  ),
  t('$SYS/broker/load/bytes/sent', ['$SYS/broker/bytes/sent', '$SYS/bytes/sent', '$SYS/load/bytes/sent'], 'counter', true, (f) => f.bytesSent),
  t('$SYS/load/messages/received', [], 'counter', true, (f) => f.packetsReceived),
  t('$SYS/load/messages/sent', [], 'counter', true, (f) => f.packetsSent),
  // its alias $SYS/load/messages/received collides with the primary above; the primary keeps that name
  t('$SYS/broker/messages/received', ['$SYS/messages/received', '$SYS/load/messages/received'], 'counter', true, (f) => f.messagesReceived),
  t('$SYS/broker/messages/sent', ['$SYS/messages/sent'], 'counter', true, (f) => f.messagesSent),
  t('$SYS/broker/messages/inflight', ['$SYS/messages/inflight'], 'gauge', true, (f) => f.inflight),
  t('$SYS/broker/messages/stored', ['$SYS/messages/stored'], 'gauge', true, (f) => f.stored),
  t(
    '$SYS/broker/messages/retained/count',
    ['$SYS/broker/retained/messages/count', '$SYS/messages/retained/count'],
    'gauge',
    true,
    (f) => f.retained,
  ),
  t(
    '$SYS/broker/publish/messages/dropped',
    ['$SYS/broker/messages/publish/dropped', '$SYS/messages/publish/dropped', '$SYS/load/publish/dropped'],
    'counter',
    true,
    (f) => f.dropped,
  ),
  t(
    '$SYS/broker/publish/messages/received',
    ['$SYS/load/publish/received', '$SYS/messages/publish/received'],
    'counter',
    true,
    (f) => f.messagesReceived,
  ),
  t('$SYS/broker/publish/messages/sent', ['$SYS/messages/publish/sent', '$SYS/load/publish/sent'], 'counter', true, (f) => f.messagesSent),
];

export const AVERAGE_WINDOWS_MINUTES = [1, 5, 10, 15] as const;

/** The names a topic is published under: the primary and every alias that is not itself a primary topic. */
function namesOf(def: TopicDef): string[] {
  return [def.topic, ...def.aliases.filter((a) => !PRIMARIES.has(a))];
}
const PRIMARIES = new Set(SYS_TOPICS.map((d) => d.topic));

/** Unix-load-style moving averages of one figure. */
class Ewma {
  private readonly avgs: number[] = AVERAGE_WINDOWS_MINUTES.map(() => 0);
  private last?: { at: number; value: number };

  constructor(private readonly kind: 'counter' | 'gauge') {}

  sample(value: number, at: number): void {
    const prev = this.last;
    this.last = { at, value };
    if (prev === undefined) {
      // start from the current level for gauges; a rate needs two samples
      if (this.kind === 'gauge') this.avgs.fill(value);
      return;
    }
    const dtSeconds = (at - prev.at) / 1000;
    if (!(dtSeconds > 0)) return;
    const x = this.kind === 'counter' ? Math.max(0, value - prev.value) / dtSeconds : value;
    AVERAGE_WINDOWS_MINUTES.forEach((m, i) => {
      const w = Math.exp(-dtSeconds / (m * 60));
      this.avgs[i] = this.avgs[i]! * w + x * (1 - w);
    });
  }

  values(): number[] {
    return this.avgs;
  }
}

/** Builds and publishes the `$SYS` topics; one per server boot. */
export class SysTopicPublisher {
  private readonly lastPayload = new Map<string, string>();
  private readonly averages = new Map<string, Ewma>();
  /** Messages this publisher put into the engine, left out of the "messages received" figures. */
  private ownPublishes = 0;

  constructor(
    private readonly rt: Runtime,
    private readonly deps: SysTopicsDeps,
    private readonly opts: { averages: boolean; statusTopics: boolean },
  ) {}

  private figures(engine: Engine): Figures {
    const rt = this.rt;
    const s = engine.stats();
    const n = rt.network;
    let stored = 0;
    let inflight = 0;
    let retained = 0;
    for (const d of engine.destinations()) {
      if (d.name.startsWith('$')) continue;
      if (d.type === 'Queue' || d.type === 'TemporaryQueue') stored += d.storedMessages;
      else retained += d.storedMessages; // a topic's stored message is its retained message
      inflight += d.pendingMessages;
    }
    const now = rt.now();
    const received = Math.max(0, s.totalPublishedMessages - this.ownPublishes);
    return {
      now,
      uptimeSeconds: Math.max(0, Math.floor((Date.now() - rt.startedAt) / 1000)),
      subscriptions: s.subscriptions,
      connected: n.currentConnections,
      peakConnections: n.peakConnections,
      totalConnections: n.totalConnections,
      totalDisconnections: n.totalDisconnections,
      expiredSessions: 0, // no session expiry figure is kept yet
      bytesReceived: n.totalReadBytes,
      bytesSent: n.totalWriteBytes,
      packetsReceived: n.packetsReceived,
      packetsSent: n.packetsSent,
      messagesReceived: received,
      messagesSent: s.totalDeliveredMessages,
      inflight,
      stored,
      retained,
      dropped: s.totalDroppedMessages,
    };
  }

  private publish(engine: Engine, topic: string, payload: string, contentType: string): void {
    if (this.lastPayload.get(topic) === payload) return;
    this.lastPayload.set(topic, payload);
    this.ownPublishes++;
    engine.publish(topic, { payload, retain: true, contentType }).catch((err) => {
      this.lastPayload.delete(topic); // try again next time
      this.rt.log.debug({ err, topic }, '$SYS publish failed');
    });
  }

  /** One round: compute every figure and publish the topics whose payload changed. */
  async tick(): Promise<void> {
    const engine = this.deps.messaging.engine;
    if (engine === undefined || engine.isClosed) return;
    const f = this.figures(engine);
    for (const def of SYS_TOPICS) {
      const v = def.value(f);
      const payload = String(v);
      const names = namesOf(def);
      for (const name of names) this.publish(engine, name, payload, 'text/plain; charset=utf-8');
      if (!this.opts.averages || !def.averaged || def.kind === 'text') continue;
      let avg = this.averages.get(def.topic);
      if (avg === undefined) this.averages.set(def.topic, (avg = new Ewma(def.kind)));
      avg.sample(Number(v), f.now);
      const values = avg.values();
      AVERAGE_WINDOWS_MINUTES.forEach((m, i) => {
        const text = values[i]!.toFixed(2);
        for (const name of names) this.publish(engine, `${name}/${m}`, text, 'text/plain; charset=utf-8');
      });
    }
    // the cluster totals under $SYS/broker/cluster/ (src/cluster/stats.ts); none with the cluster off
    for (const [topic, payload] of this.rt.service('clusterViews')?.sysTopics() ?? []) this.publish(engine, topic, payload, 'text/plain; charset=utf-8');
    if (!this.opts.statusTopics) return;
    const json = 'application/json';
    this.publish(engine, '$SYS/server/status', JSON.stringify(serverStats(this.rt)), json);
    const info = await serverInfo(this.rt, this.rt.destinationCount());
    if (this.deps.messaging.engine !== engine || engine.isClosed) return;
    this.publish(engine, '$SYS/server/details', JSON.stringify(info), json);
    const links = this.rt.service('integrations'); // integration connections are interfaces too (MAPS)
    this.publish(engine, '$SYS/server/interface/status', JSON.stringify([...this.deps.endpoints.views.interfaceStatuses(), ...(links?.interfaceStatuses() ?? [])]), json);
    for (const e of links?.entries() ?? []) this.publish(engine, `$SYS/server/integration/${e.name.replace(/[+#/\u0000]/g, '_')}/status`, JSON.stringify(links!.status(e)), json);
    this.publish(
      engine,
      '$SYS/server/destination/status',
      JSON.stringify(engine.destinations().filter((d) => !d.name.startsWith('$'))),
      json,
    );
  }
}

/** What the `$SYS` publisher is given (src/compose.ts): the engine, and the endpoint views for $SYS/server/interface/status. */
export interface SysTopicsDeps {
  messaging: MessagingService;
  endpoints: EndpointsService;
}

/** The `$SYS` publisher as a service, started after (stopped before) what it is given. */
export function sysTopicsService(deps: SysTopicsDeps): Service {
  let timer: NodeJS.Timeout | undefined;
  return {
    name: 'sys-topics',
    dependsOn: Object.keys(deps),
    async start(rt: Runtime) {
      const md = rt.config.MessageDaemon;
      if (!md.enableSystemTopics) return;
      const publisher = new SysTopicPublisher(rt, deps, { averages: md.enableSystemTopicAverages, statusTopics: md.enableSystemStatusTopics });
      let running = false;
      const tick = () => {
        if (running) return; // a slow round (store size walk) is never overlapped
        running = true;
        publisher
          .tick()
          .catch((err) => rt.log.warn({ err }, '$SYS topics update failed'))
          .finally(() => {
            running = false;
          });
      };
      tick();
      timer = setInterval(tick, md.systemTopicInterval);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}
