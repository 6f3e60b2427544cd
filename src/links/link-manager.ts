/**
 * The link manager: everything an integration link does besides its lifecycle (which is the `integration:<name>`
 * actor, actors/integrations/integration.machine.ts). Per link and per linkConfig:
 *
 * - push: a durable engine subscription on the local namespace (with the linkConfig's selector and QoS) is the link's
 *   PERSISTENT OUTBOX. It is made when the service starts, whatever the link's state, so a message published locally
 *   is in the outbox (written through the engine's group commit to LevelDB) before its publisher gets PUBACK; it is
 *   removed only after the transport's `send()` resolved (remote PUBACK / PUBCOMP / JetStream ack). After a crash the
 *   engine recovers the held messages and the link sends them when it is established again. The outbox is capped
 *   (`maxOutbox`): when full, QoS >= 1 publishes that would enter it are refused to their publisher (MQTT 5 PUBACK
 *   0x97 Quota exceeded, REST 429; a 3.1.1 publisher per the endpoint's quotaExceededPolicy311) and a QoS 0 copy
 *   replaces the oldest QoS 0 copy (counted as dropped). While the link is not established (or paused) nothing is
 *   sent: the outbox holds; once established it drains in publish order, at most `inFlight` unacknowledged.
 * - pull: `transport.receive()` on the remote namespace; each message is published into the local engine under the
 *   local namespace and the transport acknowledges it only after the engine took it (stored where it must be).
 *
 * Loop prevention, for every transport: a message that came in over a link carries `sy.origin` / `sy.hops` in its
 * metaData and is never pushed out again; a received message whose origin server is this broker is dropped
 * (acknowledged, not published) and counted in `loopsDropped`.
 */
import { fromCallback, fromPromise } from 'xstate';
import { integrationMachine, type IntegrationEvent, type LinkTransportLike, type TransportHolderEvent } from '../../actors/integrations/integration.machine.js';
import { backoffDelay } from '../../actors/shared/backoff.js';
import { PUBLISHED, type Engine, type Message, type MessageInit, type Subscription } from '../engine/index.js';
import { IngressResult, ingress, ingressContext, refusalText } from '../engine/ingress.js';
import { messageSelector } from '../messaging/message-selector.js';
import { findByName } from '../runtime/registry.js';
import type { Runtime } from '../runtime/runtime.js';
import type { LinkConfig, LinkDirectionConfig, NetworkConnectionManagerConfig } from './link-config.js';
import { SharedGroupFederation, type ShareHost } from './nats-shares.js';
import { IdRing, StoredReceivedIds, type ReceivedIds } from './received-ids.js';
import { copyOptionalFields, HANDED, isDescribed, type LinkMessage, type LinkTransport, type TransportContext, type TransportDescription, type TransportFactory } from './transport.js';

export const META_ORIGIN = 'sy.origin';
export const META_HOPS = 'sy.hops';
/**
 * The id a received message had in its sender's outbox (`<server>:<link>:<channel>:<message id there>`, the same on
 * every node that receives it): the cluster's session plane tells two nodes' copies of one message apart by it when a
 * session moves between them (src/cluster/sessions.ts).
 */
export const META_LINK_ID = 'sy.lid';

/** The part of a namespace before its first wildcard level: `a/b/#` → `a/b/`, `a/+/c` → `a/`, `#` → '', `a/b` → `a/b`. */
export function namespacePrefix(ns: string): string {
  const hit = prefixCache.get(ns);
  if (hit !== undefined) return hit;
  const p = computePrefix(ns);
  if (prefixCache.size < 1024) prefixCache.set(ns, p); // namespaces come from link configs: a few; capped anyway
  return p;
}

const prefixCache = new Map<string, string>();

function computePrefix(ns: string): string {
  const levels = ns.split('/');
  const i = levels.findIndex((l) => l === '+' || l === '#');
  if (i < 0) return ns;
  return levels.slice(0, i).map((l) => l + '/').join('');
}

/** A namespace as a subscription filter: `a/b/` → `a/b/#`, '' → `#`, wildcards and exact topics as they are. */
export function namespaceFilter(ns: string): string {
  if (ns === '') return '#';
  if (ns.endsWith('/')) return ns + '#';
  return ns;
}

/** A topic under `fromNs` moved under `toNs`: the part after from's prefix is kept. */
export function mapTopic(topic: string, fromNs: string, toNs: string): string {
  const from = namespacePrefix(fromNs);
  const to = namespacePrefix(toNs);
  const rest = topic.startsWith(from) ? topic.slice(from.length) : topic;
  if (to === '') return rest;
  if (rest === '') return to.endsWith('/') ? to.slice(0, -1) : to;
  return to.endsWith('/') ? to + rest : `${to}/${rest}`;
}

/** A received message the engine took: counted. */
function received(c: LinkCounters, m: LinkMessage): void {
  c.messagesReceived++;
  c.bytesReceived += m.payload.length;
  c.lastReadTime = Date.now();
}

/** Whether the engine holds `payload` as the retained message of `topic` (an empty payload: holds none). */
function holdsRetained(engine: Engine, topic: string, payload: Buffer): boolean {
  const held = engine.retained(topic);
  return held === undefined ? payload.length === 0 : held.payload.equals(payload);
}

/** Exponentially weighted per-second rates over 1, 5 and 15 minutes (MAPS LinkedMovingAverageRecordDTO shape). */
class MovingRate {
  private last?: { at: number; value: number };
  current = 0;
  readonly avgs = [0, 0, 0];
  sample(value: number, at: number): void {
    const prev = this.last;
    if (prev && at - prev.at < 1000) return;
    this.last = { at, value };
    if (!prev) return;
    const dt = (at - prev.at) / 1000;
    const x = Math.max(0, value - prev.value) / dt;
    this.current = Math.round(x * 100) / 100;
    [1, 5, 15].forEach((m, i) => {
      const w = Math.exp(-dt / (m * 60));
      this.avgs[i] = this.avgs[i]! * w + x * (1 - w);
    });
  }
}

export interface LinkCounters {
  bytesSent: number;
  bytesReceived: number;
  messagesSent: number;
  messagesReceived: number;
  errors: number;
  lastReadTime: number;
  lastWriteTime: number;
  /** Received messages whose origin is this broker: dropped, acknowledged. */
  loopsDropped: number;
  /** Pushed messages the remote side refused with a negative reason code: dropped. */
  refused: number;
  /** Received messages the ingress refused ($SYS topic, payload schema): acknowledged and dropped. */
  rejected: number;
  /** QoS 0 messages the transport dropped because this broker was behind reading them (NATS `qos0Subjects`). */
  qos0Dropped: number;
  connects: number;
  connectedSince: number;
}

interface PushChannel {
  index: number;
  lc: LinkDirectionConfig;
  filter: string;
  sessionId: string;
  sub?: Subscription;
  inFlight: number;
  flowing: boolean;
  /** `<server id>:<link>:<index>:`, the prefix of the outbox ids this channel sends (set on first use). */
  idPrefix?: string;
}

export interface LinkEntry {
  name: string;
  config: LinkConfig;
  counters: LinkCounters;
  rates: { messagesSent: MovingRate; messagesReceived: MovingRate; bytesSent: MovingRate; bytesReceived: MovingRate };
  /**
   * The open transport, read from the `integration:<name>` actor's snapshot (its holder owns it): undefined unless
   * connected. A view for the status and the tests, never a second handle.
   */
  readonly transport: LinkTransport | undefined;
  /** What the connected transport said about itself (a copy of its description, not the transport). */
  description?: TransportDescription;
  /** The close of the last transport the link's actor let go of: the next connect waits for it (same client id). */
  closing: Promise<void>;
  push: PushChannel[];
  /** Set while the link is established: reports a lost transport to the actor. */
  onLost?: (reason: string) => void;
  lostReason?: string;
  /** Why the link is not established ('' / undefined while it is): shown as `lastError` in its status. */
  lastError?: string;
  /** Set when an established link dropped; cleared (with an INFO line) when it is established again. */
  droppedAt?: number;
  /** When the link was last established (ms). */
  establishedAt?: number;
  /** Times in a row the remote side broke a limit (message size, flood): each doubles the wait before reconnecting. */
  strikes: number;
  lastStrikeAt?: number;
  maxOutbox: number;
  maxOutboxBytes: number;
  /** `link:<name>`, the engine origin of what this link receives (set on first use). */
  origin?: string;
}

function newCounters(): LinkCounters {
  return { bytesSent: 0, bytesReceived: 0, messagesSent: 0, messagesReceived: 0, errors: 0, lastReadTime: 0, lastWriteTime: 0, loopsDropped: 0, refused: 0, rejected: 0, qos0Dropped: 0, connects: 0, connectedSince: 0 };
}

/**
 * Transports are loaded on first use: a broker without NATS links never loads the NATS client, one without MQTT
 * bridges never loads mqtt.js (idle memory, docs/operations.md). A failed load is retried at the next connect.
 */
const factories = new Map<'nats' | 'mqtt', Promise<TransportFactory>>();
function loadTransport(kind: 'nats' | 'mqtt'): Promise<TransportFactory> {
  let p = factories.get(kind);
  if (!p) {
    p = (kind === 'nats' ? import('./nats-transport.js').then((m) => m.createNatsTransport) : import('./mqtt-transport.js').then((m) => m.createMqttTransport)).catch((err: Error) => {
      factories.delete(kind);
      throw new Error(`${kind === 'nats' ? 'NATS' : 'MQTT'} transport not available: ${err.message}`);
    });
    factories.set(kind, p);
  }
  return p;
}

export class LinkManager {
  readonly entries = new Map<string, LinkEntry>();
  /** Shared subscriptions across brokers over NATS links (nats-shares.ts). */
  readonly shares = new SharedGroupFederation({
    links: () => this.entries.values(),
    namespacePrefix,
    mapTopic,
    metaOf: (m) => ({ [META_ORIGIN]: m.originServer || 'link', [META_HOPS]: String(Math.max(1, m.hops)) }),
    log: { warn: (obj, msg) => this.rt.log.warn(obj, msg) },
    dropped: (name) => {
      const entry = this.entries.get(name);
      if (entry) this.qos0Dropped(entry);
    },
  });
  private engine?: Engine;
  /** The ids each durable consumer handed over (received-ids.ts), by consumer name: kept across reconnects. */
  private readonly receivedIds = new Map<string, Promise<ReceivedIds>>();
  /** Set by closeAll (server stop): nothing is logged or connected any more (the logs close after the services). */
  private stopped = false;
  /**
   * Transports whose link let go of them (closed or closing): their late events and acknowledgements are ignored. The
   * transports themselves are owned by the `integration:<name>` actors (their `transportHolder`); this only marks.
   */
  private readonly retired = new WeakSet<object>();

  constructor(
    private readonly rt: Runtime,
    private readonly cfg: NetworkConnectionManagerConfig,
  ) {
    for (const link of cfg.data) this.entries.set(link.name, this.makeEntry(link));
  }

  private makeEntry(link: LinkConfig): LinkEntry {
    const push: PushChannel[] = [];
    link.linkConfigs.forEach((lc, index) => {
      if (lc.direction !== 'push') return;
      push.push({ index, lc, filter: namespaceFilter(lc.localNamespace), sessionId: `link:${link.name}#${index}`, inFlight: 0, flowing: false });
    });
    const rt = this.rt;
    return {
      name: link.name,
      get transport() {
        return rt.actor('integration', link.name)?.getSnapshot().context.transport as LinkTransport | undefined;
      },
      config: link,
      counters: newCounters(),
      rates: { messagesSent: new MovingRate(), messagesReceived: new MovingRate(), bytesSent: new MovingRate(), bytesReceived: new MovingRate() },
      closing: Promise.resolve(),
      push,
      maxOutbox: link.maxOutbox ?? this.cfg.globalConfig.maxOutbox,
      maxOutboxBytes: link.maxOutboxBytes ?? this.cfg.globalConfig.maxOutboxBytes,
      strikes: 0,
    };
  }

  // ------------------------------------------------------------------------------------------------------------
  // Configuration reload (src/runtime/reload.ts)

  /**
   * A link added by a configuration reload: its entry and its outboxes (the caller spawns its actor). Throws when a
   * link of that name exists.
   */
  add(link: LinkConfig): LinkEntry {
    if (this.find(link.name)) throw new Error(`integration "${link.name}" exists`);
    const entry = this.makeEntry(link);
    this.entries.set(link.name, entry);
    if (this.engine) {
      for (const ch of entry.push) this.openOutbox(this.engine, entry, ch);
      // the shared groups that exist already (restored persistent sessions) are judged again with this link: one it
      // covers is fed by the link from now on, not by local routing as well (that gave its messages twice per group)
      this.installShares(this.engine);
    }
    return entry;
  }

  /**
   * Whether a link's new configuration can replace the running one in place: its outboxes (the durable engine
   * subscriptions that hold acknowledged messages: the push directions' local namespaces, QoS and selectors, and
   * the outbox caps) and its backoff (the actor's input) stay as they are. Anything else (address, credentials,
   * remote namespaces, pull directions, limits) is read again at the next connect.
   */
  static replaceableInPlace(from: LinkConfig, to: LinkConfig): boolean {
    // the actor took its backoff as input when it was spawned: a new backoff needs a new actor, i.e. a restart
    const outboxes = (l: LinkConfig) =>
      JSON.stringify([l.backoff ?? null, l.maxOutbox ?? null, l.maxOutboxBytes ?? null, l.linkConfigs.map((lc, i) => (lc.direction === 'push' ? [i, lc.localNamespace, lc.qualityOfService, lc.selector ?? null] : [i]))]);
    return from.name === to.name && outboxes(from) === outboxes(to);
  }

  /** Replaces a link's configuration (see replaceableInPlace); the caller restarts its actor so the next connect uses it. */
  replaceConfig(entry: LinkEntry, link: LinkConfig): void {
    entry.config = link;
    for (const ch of entry.push) ch.lc = link.linkConfigs[ch.index]!;
  }

  get serverId(): string {
    return this.rt.serverName;
  }

  /** Case-sensitive first, then case-insensitive. */
  find(name: string): LinkEntry | undefined {
    return findByName(this.entries, name);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Outboxes (push)

  /** After every boot: the durable outbox subscriptions (their held messages are recovered by the engine). */
  openOutboxes(engine: Engine): void {
    this.engine = engine;
    for (const entry of this.entries.values()) for (const ch of entry.push) this.openOutbox(engine, entry, ch);
    // shared groups in a NATS link's namespaces are fed by the link only (nats-shares.ts)
    this.installShares(engine);
  }

  private installShares(engine: Engine): void {
    if (typeof (engine as Partial<ShareHost>).setExternalShares === 'function') this.shares.install(engine as unknown as ShareHost);
  }

  private openOutbox(engine: Engine, entry: LinkEntry, ch: PushChannel): void {
    const user = messageSelector(ch.lc.selector);
    const sub = engine.subscribe({
      sessionId: ch.sessionId,
      filter: ch.filter,
      qos: ch.lc.qualityOfService as 0 | 1 | 2,
      durable: true,
      refuseWhenFull: true,
      maxDepth: entry.maxOutbox,
      maxBytes: entry.maxOutboxBytes,
      writeBehindMs: this.cfg.globalConfig.outboxWriteBehind,
      retainHandling: 2, // live retained messages cross with their retain flag; stored ones are not re-sent at every boot
      retainAsPublished: true,
      // messages that came in over a link are never pushed again (loop prevention), nor $SYS
      accept: (m, destinationName) => m.metaData[META_HOPS] === undefined && destinationName.charCodeAt(0) !== 36 /* $ */,
      ...(user !== undefined ? { selector: user } : {}),
      sink: { kind: 'push', deliver: () => false }, // hibernated below: nothing is sent before the link flows
    });
    ch.sub = sub;
    ch.flowing = false;
    ch.inFlight = 0;
    sub.hibernate(); // holds (persisted) until the link is established
  }

  /** The engine is closing (server stop / restart): forget the handles; the held messages stay in the store. */
  closeOutboxes(): void {
    this.engine = undefined;
    this.shares.uninstall();
    for (const entry of this.entries.values()) for (const ch of entry.push) ch.sub = undefined;
  }

  /** Messages waiting in the link's outboxes (held + sent and unacknowledged). */
  outboxDepth(entry: LinkEntry): number {
    let n = 0;
    for (const ch of entry.push) if (ch.sub && !ch.sub.closed) n += ch.sub.held.size + ch.sub.inFlight.size;
    return n;
  }

  private startFlow(entry: LinkEntry, transport: LinkTransport): void {
    for (const ch of entry.push) {
      if (!ch.sub || ch.sub.closed || ch.flowing) continue;
      ch.flowing = true;
      ch.inFlight = 0;
      // the transport travels with the sink, for as long as the actor's linkFlow lives
      ch.sub.attach({ kind: 'push', deliver: (s, msg, dest) => this.deliver(entry, ch, s, msg, dest, transport) });
    }
  }

  private stopFlow(entry: LinkEntry): void {
    for (const ch of entry.push) {
      if (!ch.flowing) continue;
      ch.flowing = false;
      ch.inFlight = 0;
      // unacknowledged messages go back to the head of the outbox, in order; late acknowledgements find nothing
      if (ch.sub && !ch.sub.closed) ch.sub.hibernate();
    }
  }

  private deliver(entry: LinkEntry, ch: PushChannel, sub: Subscription, msg: Message, destinationName: string, transport: LinkTransport): boolean {
    if (!ch.flowing || this.retired.has(transport) || ch.inFlight >= this.cfg.globalConfig.inFlight) return false;
    const qos = Math.min(msg.qos, ch.lc.qualityOfService) as 0 | 1 | 2;
    const out: LinkMessage = {
      topic: mapTopic(destinationName, ch.lc.localNamespace, ch.lc.remoteNamespace),
      payload: msg.payload,
      qos,
      retain: msg.retain,
      originServer: msg.metaData[META_ORIGIN] ?? this.serverId,
      hops: (Number(msg.metaData[META_HOPS] ?? 0) || 0) + 1,
      // stable across retries and restarts (engine ids survive them): JetStream de-duplicates a resend (Nats-Msg-Id)
      id: (ch.idPrefix ??= `${this.serverId}:${entry.name}:${ch.index}:`) + msg.id,
      priority: msg.priority,
    };
    copyOptionalFields(msg, out);
    ch.inFlight++;
    const tracked = sub.qos > 0 && msg.qos > 0;
    transport.send(out).then(
      () => {
        const c = entry.counters;
        c.messagesSent++;
        c.bytesSent += msg.payload.length;
        c.lastWriteTime = Date.now();
        if (this.retired.has(transport) || !ch.flowing) return;
        ch.inFlight--;
        if (tracked) sub.ack(msg.id);
        if (sub.blocked) sub.resume();
      },
      (err: Error & { code?: unknown; permanent?: boolean }) => {
        entry.counters.errors++;
        if (this.retired.has(transport) || !ch.flowing) return;
        ch.inFlight--;
        if ((typeof err.code === 'number' && err.code >= 0x80) || err.permanent === true) {
          // the remote side refused this message (an MQTT 5 reason code, a topic NATS cannot carry): sending it again
          // would be refused again
          entry.counters.refused++;
          if (!this.stopped) this.rt.log.warn({ link: entry.name, topic: out.topic, code: err.code, err: err.message }, 'integration link: the remote side refused a message; dropped');
          if (tracked) sub.ack(msg.id);
          if (sub.blocked) sub.resume();
          return;
        }
        this.lost(entry, transport, `send failed: ${err.message}`);
      },
    );
    return true;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Pull

  /**
   * One received message into the engine. Not an async function: a message the engine took at once (delivered to
   * connected clients, nothing written) answers HANDED, so the transport acknowledges it without a promise, an await
   * and their closures per message (with the hand-over around it, a fifth of what a receiving broker allocated per
   * message in bench/federation's QoS 1 latency scenario). Throws (rather than rejects) what it refuses.
   */
  private receiveOne(entry: LinkEntry, lc: LinkDirectionConfig, m: LinkMessage, seen?: ReceivedIds): Promise<void> {
    const c = entry.counters;
    if (m.originServer === this.serverId) {
      c.loopsDropped++;
      return HANDED; // our own message came back: acknowledge and drop
    }
    const engine = this.engine;
    if (!engine || engine.isClosed) throw new Error('the messaging engine is not running');
    const topic = mapTopic(m.topic, lc.remoteNamespace, lc.localNamespace);
    // the retained set a NATS pull starts with (SY_RETAINED, stored with the id `r:<id>`) comes again at every
    // (re)connect: what this broker already holds as the same retained message is not published again, or its live
    // subscribers would get every retained message once more each time the link reconnects
    if (m.retain && m.id !== undefined && m.id.startsWith('r:') && holdsRetained(engine, topic, m.payload)) return HANDED;
    const init: MessageInit = {
      payload: m.payload,
      qos: Math.min(m.qos, lc.qualityOfService) as 0 | 1 | 2,
      retain: m.retain,
      metaData:
        m.id === undefined
          ? { [META_ORIGIN]: m.originServer || `link:${entry.name}`, [META_HOPS]: String(Math.max(1, m.hops)) }
          : { [META_ORIGIN]: m.originServer || `link:${entry.name}`, [META_HOPS]: String(Math.max(1, m.hops)), [META_LINK_ID]: m.id },
    };
    copyOptionalFields(m, init);
    // the one ingress path (src/engine/ingress.ts): the link is configured, so no ACL; $SYS and the payload schema
    // apply as to any publisher, and the engine's flow control
    const cx = ingressContext(engine, undefined, undefined, topic, init, { origin: entry.origin ??= `link:${entry.name}` });
    const result = ingress(cx);
    if (result === IngressResult.Unavailable) throw new Error('the messaging engine is not running');
    if (result !== IngressResult.Accepted && result !== IngressResult.QuotaExceeded) {
      // refused for what it is ($SYS, payload schema): it would be refused again, so it is acknowledged and dropped,
      // counted in `rejected` (a full subscription instead leaves it unacknowledged, to come again later)
      c.rejected++;
      if ((c.rejected & (c.rejected - 1)) === 0 && !this.stopped) {
        this.rt.log.warn({ link: entry.name, topic, err: refusalText(cx, result), rejected: c.rejected }, 'integration link: a received message was refused; dropped');
      }
      return HANDED;
    }
    const published = cx.written!;
    // the id's record in the same synchronous step: one store batch with the message (received-ids.ts). Only when the
    // engine stored the message (a durable session's copy, a queue message, a retained one): a message that went to
    // live connections only is not kept here, so a restart has nothing of it to deliver twice (JetStream's redelivery,
    // if its ack had not left, reaches the clients connected then: at least once); recording it anyway made a LevelDB
    // batch in every turn of a receiving broker, cut before the turn's socket writes (bench/federation p99)
    if (seen instanceof StoredReceivedIds && m.id !== undefined && result === IngressResult.Accepted && published !== PUBLISHED) seen.record(m.id);
    if (published === PUBLISHED) {
      received(c, m);
      return HANDED;
    }
    return published.then(() => received(c, m));
  }

  // ------------------------------------------------------------------------------------------------------------
  // Transport lifecycle (called by the actor's provided implementations)

  private factoryFor(url: string): Promise<TransportFactory> {
    const scheme = url.slice(0, url.indexOf(':')).toLowerCase();
    if (scheme === 'nats' || scheme === 'tls') return loadTransport('nats');
    if (['mqtt', 'mqtts', 'ws', 'wss'].includes(scheme)) return loadTransport('mqtt');
    return Promise.reject(new Error(`no transport for the URL scheme "${scheme}"`));
  }

  private lost(entry: LinkEntry, transport: LinkTransport, reason: string): void {
    if (this.retired.has(transport)) return; // a transport the link let go of: its close is no news
    entry.lastError = reason;
    if (entry.lostReason !== undefined) return;
    entry.lostReason = reason;
    if (entry.onLost) {
      // an established link dropped: one WARN (an INFO follows when it is back)
      entry.droppedAt = Date.now();
      if (!this.stopped) this.rt.log.warn({ link: entry.name, url: entry.config.url, reason }, `integration link ${entry.name} lost its connection (${reason}); reconnecting with backoff`);
    }
    entry.onLost?.(reason);
  }

  /**
   * The remote side broke a limit (a message too large, a flood): counted as a strike. Strikes double the wait before
   * the next connection (from backoff.initial up to backoff.max), on top of the actor's backoff, which a peer that
   * misbehaves only once established would otherwise reset; they are forgotten once the link has stayed established
   * for backoff.max without one.
   */
  private misbehaved(entry: LinkEntry): void {
    const now = Date.now();
    const b = entry.config.backoff ?? this.cfg.globalConfig.backoff;
    if (entry.establishedAt !== undefined && (entry.lastStrikeAt ?? 0) < entry.establishedAt && now - entry.establishedAt > b.max) entry.strikes = 0;
    entry.strikes++;
    entry.lastStrikeAt = now;
  }

  private penalty(entry: LinkEntry, signal: AbortSignal): Promise<void> {
    if (entry.strikes === 0 || signal.aborted) return Promise.resolve();
    const b = entry.config.backoff ?? this.cfg.globalConfig.backoff;
    // a link that stayed established for backoff.max since its last strike forgets its strikes (a later ordinary
    // drop reconnects with the actor's backoff alone)
    const stableFor = (entry.droppedAt ?? Date.now()) - (entry.establishedAt ?? Infinity);
    if ((entry.lastStrikeAt ?? 0) < (entry.establishedAt ?? 0) && stableFor > b.max) {
      entry.strikes = 0;
      return Promise.resolve();
    }
    const ms = backoffDelay(entry.strikes, b.initial, Math.max(b.max, b.initial));
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done);
    });
  }

  /**
   * Opens the link's transport and resolves with it: the actor takes it (its `transportHolder` owns it from here and
   * closes it). A failed or cancelled connect closes what it opened itself.
   */
  async connect(name: string, signal: AbortSignal): Promise<LinkTransport> {
    const entry = this.entries.get(name);
    if (!entry) throw new Error(`integration "${name}" is not configured`);
    await entry.closing; // the previous connection is gone before the next one opens (same client id)
    await this.penalty(entry, signal); // a peer that broke a limit waits longer each time (lastError keeps why)
    if (signal.aborted) throw new Error('connect cancelled');
    if (this.stopped) throw new Error('the server is stopping');
    const factory = await this.factoryFor(entry.config.url);
    const ctx: TransportContext = {
      serverId: this.serverId,
      log: this.rt.log.child({ link: entry.name }) as unknown as TransportContext['log'],
      connectTimeout: this.cfg.globalConfig.connectTimeout,
      maxMessageSize: entry.config.maxMessageSize ?? this.cfg.globalConfig.maxMessageSize,
    };
    const transport = factory(entry.config, ctx);
    entry.lostReason = undefined;
    transport.onEvent((e) => {
      if (e.type === 'disconnected') this.lost(entry, transport, e.reason);
      else if (e.type === 'error') {
        entry.counters.errors++;
        entry.lastError = e.reason;
        if (e.misbehaving) this.misbehaved(entry);
      }
    });
    try {
      await transport.connect();
    } catch (err) {
      entry.counters.errors++;
      entry.lastError = (err as Error).message;
      this.retire(entry, transport);
      if (!this.stopped) this.rt.log.warn({ link: entry.name, url: entry.config.url, err: (err as Error).message }, 'integration link could not connect; retrying with backoff');
      throw err;
    }
    if (signal.aborted || this.stopped) {
      this.retire(entry, transport);
      throw new Error('connect cancelled');
    }
    entry.description = isDescribed(transport) ? transport.describe() : undefined;
    entry.counters.connects++;
    entry.counters.connectedSince = Date.now();
    if (!this.stopped) this.rt.log.info({ link: entry.name, url: entry.config.url }, `integration link ${entry.name} connected to ${entry.config.url}`);
    return transport;
  }

  /** Closes a transport the link let go of (its holder releasing it, or a failed connect); the next connect waits. */
  retire(entry: LinkEntry, transport: LinkTransport): void {
    if (this.retired.has(transport)) return;
    this.retired.add(transport);
    entry.closing = transport.close().catch(() => {});
  }

  /**
   * The memory of the ids a durable consumer handed over, loaded from the engine's store once and kept
   * (received-ids.ts); in memory only when the engine has no store.
   */
  private idsOf(consumer: string): Promise<ReceivedIds> {
    let p = this.receivedIds.get(consumer);
    if (!p) {
      const engine = this.engine;
      p = engine && engine.hasStore ? StoredReceivedIds.load(engine, consumer) : Promise.resolve(new IdRing());
      this.receivedIds.set(consumer, p);
      p.catch(() => this.receivedIds.delete(consumer));
    }
    return p;
  }

  /**
   * The pull receives and shared groups of a connected link. Bounded in time (3 x connectTimeout, at least 30 s): a
   * remote side that never answers leaves the link Delayed with the reason in `lastError`, not Establishing forever.
   */
  async establish(name: string, transport: LinkTransport | undefined): Promise<void> {
    const entry = this.entries.get(name);
    if (!entry || !transport || this.retired.has(transport)) throw new Error(`integration "${name}" has no connection`);
    const limit = Math.max(30000, 3 * this.cfg.globalConfig.connectTimeout);
    const step = { what: 'starting' };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`not established within ${limit / 1000} s (${step.what})`)), limit);
    });
    try {
      await Promise.race([this.establishSteps(entry, transport, step), timeout]);
    } catch (err) {
      if (entry.lostReason === undefined || entry.lastError === undefined) {
        entry.counters.errors++;
        entry.lastError = `establishing: ${(err as Error).message}`;
      }
      if (!this.stopped) this.rt.log.warn({ link: entry.name, url: entry.config.url, err: entry.lastError }, `integration link ${entry.name} could not be established; retrying with backoff`);
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async establishSteps(entry: LinkEntry, transport: LinkTransport, step: { what: string }): Promise<void> {
    let index = 0;
    for (const lc of entry.config.linkConfigs) {
      const i = index++;
      if (lc.direction !== 'pull') continue;
      const filter = namespaceFilter(lc.remoteNamespace);
      const durableName = `${this.serverId}-${entry.name}-${i}`.replace(/[^A-Za-z0-9_-]/g, '_');
      step.what = `loading the ids consumer ${durableName} handed over`;
      const seen = lc.qualityOfService > 0 ? await this.idsOf(durableName) : undefined;
      step.what = `subscribing to ${filter} on the remote side`;
      await transport.receive(
        {
          filter,
          qos: lc.qualityOfService as 0 | 1 | 2,
          durableName,
          ...(lc.shareGroup ? { shareGroup: lc.shareGroup } : {}),
          ...(seen ? { seen } : {}),
          dropped: () => this.qos0Dropped(entry),
        },
        (m) => {
          if (this.retired.has(transport)) return Promise.reject(new Error('link closed'));
          let p: Promise<void>;
          try {
            p = this.receiveOne(entry, lc, m, seen);
          } catch (err) {
            p = Promise.reject(err as Error);
          }
          // taken at once (the common case): no promise chained per message
          if (p === HANDED) return p;
          return p.catch((err: Error) => {
            entry.counters.errors++;
            entry.lastError = `received message not stored: ${err.message}`;
            throw err;
          });
        },
      );
    }
    step.what = 'joining the shared groups';
    this.shares.attach(entry, transport);
    if (entry.lostReason !== undefined) throw new Error(entry.lostReason);
  }

  /** A QoS 0 message the transport dropped while this broker was behind: counted; a WARN at 1, 2, 4, 8, ... of them. */
  private qos0Dropped(entry: LinkEntry): void {
    const n = ++entry.counters.qos0Dropped;
    if ((n & (n - 1)) === 0 && !this.stopped) {
      this.rt.log.warn({ link: entry.name, qos0Dropped: n }, 'integration link: QoS 0 messages dropped while this broker was behind reading them');
    }
  }

  /** While the actor is established: push messages flow; a lost transport is reported with `onLost`. */
  flow(name: string, transport: LinkTransport | undefined, onLost: (reason: string) => void): () => void {
    const entry = this.entries.get(name);
    if (!entry) return () => {};
    if (!transport) {
      queueMicrotask(() => onLost('no transport'));
      return () => {};
    }
    entry.onLost = onLost;
    if (entry.lostReason !== undefined) queueMicrotask(() => onLost(entry.lostReason!));
    else {
      // established: nothing to explain any more
      entry.lastError = undefined;
      if (entry.droppedAt !== undefined && !this.stopped) {
        const down = Date.now() - entry.droppedAt;
        this.rt.log.info({ link: entry.name, url: entry.config.url, downMs: down }, `integration link ${entry.name} is established again after ${(down / 1000).toFixed(1)} s`);
      }
      entry.droppedAt = undefined;
      entry.establishedAt = Date.now();
      this.startFlow(entry, transport);
    }
    return () => {
      entry.onLost = undefined;
      this.stopFlow(entry);
    };
  }

  /**
   * The link's connection ended (stop, pause, backoff): nothing flows, shared groups detach, the status shows it
   * unconnected. The transport itself is closed by the actor's holder (`retire`).
   */
  disconnected(name: string): void {
    const entry = this.entries.get(name);
    if (!entry) return;
    this.stopFlow(entry);
    this.shares.detach(name);
    entry.description = undefined;
    entry.counters.connectedSince = 0;
  }

  /** Server stop: the actors (stopped with the tree) released their transports; wait for the closes. */
  async closeAll(): Promise<void> {
    this.stopped = true;
    for (const name of this.entries.keys()) this.disconnected(name);
    await Promise.all([...this.entries.values()].map((e) => e.closing));
  }

  /** The actor logic with the real I/O. */
  logic() {
    return integrationMachine.provide({
      actors: {
        // resolves with the transport (the machine types it void so fakes fit; keepTransport hands it to the holder)
        connectTransport: fromPromise<void, { name: string }>(({ input, signal }) => this.connect(input.name, signal) as Promise<unknown> as Promise<void>),
        establishLinks: fromPromise<void, { name: string; transport?: LinkTransportLike }>(({ input }) => this.establish(input.name, input.transport as LinkTransport | undefined)),
        linkFlow: fromCallback<IntegrationEvent, { name: string; transport?: LinkTransportLike }>(({ input, sendBack }) =>
          this.flow(input.name, input.transport as LinkTransport | undefined, (reason) => sendBack({ type: 'transport.lost', reason })),
        ),
        // the only owner of the open transport: closes it on release, on leaving `started`, and when the actor stops
        transportHolder: fromCallback<TransportHolderEvent, { name: string }>(({ input, receive }) => {
          const entry = this.entries.get(input.name);
          let held: LinkTransport | undefined;
          const release = () => {
            if (held && entry) this.retire(entry, held);
            held = undefined;
          };
          receive((e) => {
            release();
            if (e.type === 'transport.hold') held = e.transport as LinkTransport;
          });
          return release;
        }),
      },
      actions: {
        closeTransport: (_args, params: { name: string }) => this.disconnected(params.name),
      },
    });
  }

  /** Samples the moving averages (status views call it). */
  sample(entry: LinkEntry): void {
    const now = Date.now();
    const c = entry.counters;
    entry.rates.messagesSent.sample(c.messagesSent, now);
    entry.rates.messagesReceived.sample(c.messagesReceived, now);
    entry.rates.bytesSent.sample(c.bytesSent, now);
    entry.rates.bytesReceived.sample(c.bytesReceived, now);
  }
}

export { MovingRate };
