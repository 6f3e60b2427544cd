/**
 * The MQTT side of the broker, shared by every MQTT endpoint: the session registry (client id → session), the
 * live connections, persistence of sessions in the store, session expiry and will messages. The message path
 * goes straight to the engine; nothing here is an actor.
 */
import type { Logger } from 'pino';
import type { Engine, MessageInit, PushSink, Subscription } from '../../engine/index.js';
import { LogLimiter } from '../../log-limit.js';
import type { ConnectionOwner, MqttConnection } from './connection.js';
import { EncodeCache, WriteBatch } from './outbound.js';
import { PacketParser } from './parser.js';
import { CloseReason, Reason } from './reason.js';
import {
  dropSessionState,
  loadWill,
  MqttSession,
  parseStateKey,
  storeInbound,
  storeOutbound,
  type OutboundRecord,
  type SessionRecord,
  type StoredSubscription,
  type WillMessage,
} from './session.js';
import type { BrokerHost, ClusterAdmission, ClusterWillRegistry, SessionCluster } from './types.js';

export type { BrokerHost, ClaimResult, SessionCluster } from './types.js';

/**
 * Default cap of an MQTT subscription (held + in flight). When full, QoS 1/2 publishes that would reach it are
 * refused (flow control, docs/messaging.md) and QoS 0 copies replace the oldest QoS 0 copy.
 */
export const MAX_QUEUED = 10_000;

/** A sink that takes nothing: subscriptions of an offline session are hibernated right after being made. */
const OFFLINE_SINK: PushSink = { kind: 'push', deliver: () => false };

export class MqttBroker implements ConnectionOwner {
  readonly sessions = new Map<string, MqttSession>();
  readonly connections = new Map<number, MqttConnection>();
  /** Connections with bytes to write this tick (one socket write per connection per tick). */
  readonly writes = new WriteBatch();
  /** The last message fanned out, encoded once per protocol class, QoS and retain flag. */
  readonly encoded = new EncodeCache();
  /** The mqtt-packet parser the connections share (packets other than PUBLISH and acknowledgements). */
  readonly parser = new PacketParser();
  /** WARN lines of per-packet faults, rate-limited per connection or address and kind (MqttConnection.warnFault). */
  readonly faults = new LogLimiter();
  private nextConnectionId = 1;
  private readonly dirty = new Set<MqttSession>();
  private readonly deleted = new Set<string>();
  private flushScheduled = false;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;

  /** Cap of every MQTT subscription (see MAX_QUEUED). */
  readonly maxQueued: number;
  /** Set by the cluster's session plane while this broker is a cluster member (CONNECT asks it first, handlers/connect.ts). */
  cluster: SessionCluster | undefined;
  /** Cluster mode: set by src/cluster/wills.ts and src/cluster/admission.ts while they run. */
  wills?: ClusterWillRegistry;
  admission?: ClusterAdmission;

  constructor(readonly host: BrokerHost) {
    this.maxQueued = host.maxQueuedMessages ?? MAX_QUEUED;
  }

  get log(): Logger {
    return this.host.log;
  }

  connectionId(): number {
    return this.nextConnectionId++;
  }

  /** Recreate persistent sessions from the store (after a restart): their subscriptions hold messages until the client returns. */
  async restore(): Promise<number> {
    const store = this.host.sessions;
    const engine = this.host.engine();
    if (store === undefined || engine === undefined) return 0;
    let n = 0;
    const now = Date.now();
    for await (const [key, value] of store.iterator({ gte: 'mqtt:', lt: 'mqtt;' })) {
      let rec: SessionRecord;
      try {
        rec = JSON.parse(value.toString('utf8')) as SessionRecord;
      } catch {
        this.log.warn({ key }, 'unreadable MQTT session record dropped');
        await store.del(key);
        continue;
      }
      const s = new MqttSession(rec.clientId);
      s.expiry = rec.expiry;
      s.protocolVersion = rec.protocolVersion;
      s.username = rec.username;
      s.restored = true;
      s.disconnectedAt = rec.disconnectedAt ?? now;
      // packet-id state as older versions kept it in this record: moved to the engine store's `s!` records
      for (const pid of rec.pubrel ?? []) {
        s.outbound.set(pid, { sub: undefined, msgId: 0, qos: 2, stage: 2 });
        storeOutbound(engine, s, pid, { s: 2, q: 2 });
      }
      for (const pid of rec.inbound ?? []) {
        s.inbound.add(pid);
        storeInbound(engine, s, pid, 1);
      }
      this.sessions.set(s.clientId, s);
      this.restoreSubscriptions(engine, s, rec.subscriptions ?? []);
      if (rec.pendingWill) {
        try {
          s.pendingWill = loadWill(rec.pendingWill);
        } catch {
          this.log.warn({ clientId: s.clientId }, 'unreadable pending will dropped');
        }
      }
      n++;
    }
    await this.restoreState(engine);
    for (const s of [...this.sessions.values()]) {
      if (!s.restored) continue;
      this.scheduleExpiry(s);
      if (this.sessions.get(s.clientId) === s) this.armWill(s); // a will whose delay ran out while we were down goes now
    }
    return n;
  }

  /**
   * Make the subscriptions of an offline session (after a restart, or taken over from another broker of the
   * cluster): hibernated, they hold messages until the client returns.
   */
  restoreSubscriptions(engine: Engine, s: MqttSession, list: StoredSubscription[]): void {
    for (const o of list) {
      try {
        const sub = engine.subscribe({
          sessionId: s.sessionId,
          filter: o.filter,
          qos: o.qos,
          noLocal: o.nl,
          retainAsPublished: o.rap,
          retainHandling: 2, // no retained messages for a restored subscription
          // subscribe per delivered topic, for the user the session belongs to
          authorize: this.host.security().deliveryAuthorizer?.({ username: s.username }),
          durable: true,
          subscriptionId: o.id,
          oneCopyPerSession: true,
          maxDepth: this.maxQueued,
          refuseWhenFull: true,
          sink: OFFLINE_SINK,
        });
        sub.retainHandling = o.rh;
        sub.hibernate();
        s.subs.set(o.filter, { opts: o, sub });
      } catch (err) {
        this.log.warn({ err, clientId: s.clientId, filter: o.filter }, 'could not restore a subscription');
      }
    }
  }

  /**
   * Packet ids in flight of the restored sessions, from the engine store's `s!` records (written in the same batch
   * as the messages they refer to, so they agree with the stored messages): inbound QoS 2 ids accepted or
   * released, outbound PUBREL-stage ids, and the ids of unacknowledged outbound PUBLISHes (reserved, so those
   * messages are resent with DUP and the same id). Records of sessions that no longer exist are deleted.
   */
  private async restoreState(engine: Engine): Promise<void> {
    const bySession = new Map<string, MqttSession>();
    for (const s of this.sessions.values()) bySession.set(s.sessionId, s);
    // ids of the messages each restored subscription holds (all of them are held: the subscriptions are offline)
    const held = new Map<Subscription, Set<number>>();
    const heldIds = (sub: Subscription): Set<number> => {
      let ids = held.get(sub);
      if (ids === undefined) {
        const found = new Set<number>();
        sub.held.removeWhere(
          (m) => {
            found.add(m.id);
            return false;
          },
          () => {},
        );
        for (const id of sub.inFlight.keys()) found.add(id);
        held.set(sub, (ids = found));
      }
      return ids;
    };
    let orphans = 0;
    for await (const [key, value] of engine.stateEntries()) {
      const k = parseStateKey(key);
      if (k === null) continue; // another protocol's record
      const s = bySession.get(k.sessionId);
      if (s === undefined) {
        orphans++;
        void engine.delState(key);
        continue;
      }
      s.stateStored = true;
      if (k.kind === 'i') {
        if (value[0] === 1) s.inbound.add(k.pid);
        else s.released.add(k.pid);
        continue;
      }
      let rec: OutboundRecord;
      try {
        rec = JSON.parse(value.toString('utf8')) as OutboundRecord;
      } catch {
        void engine.delState(key);
        continue;
      }
      if (rec.s === 2) {
        s.outbound.set(k.pid, { sub: undefined, msgId: 0, qos: 2, stage: 2 });
        continue;
      }
      const sub = rec.f === undefined ? undefined : s.subs.get(rec.f)?.sub;
      if (sub === undefined || rec.m === undefined || !heldIds(sub).has(rec.m)) {
        void engine.delState(key); // its subscription or its message (expired, acknowledged) is gone: the id is free
        continue;
      }
      s.reserved.add(k.pid);
      s.redeliver.set(`${sub.id}:${rec.m}`, k.pid);
    }
    if (orphans > 0) this.log.info({ records: orphans }, 'packet-id records of ended MQTT sessions deleted');
  }

  /** Start the expiry countdown of an offline persistent session (MQTT 5 §3.1.2.11.2). */
  scheduleExpiry(s: MqttSession): void {
    if (s.expiryTimer) clearTimeout(s.expiryTimer);
    s.expiryTimer = undefined;
    if (s.conn !== undefined) return;
    if (s.expiry === 0) {
      this.endSession(s);
      return;
    }
    if (s.expiry >= 0xffffffff) return; // never expires [MQTT-3.1.2-?]
    const at = (s.disconnectedAt ?? Date.now()) + s.expiry * 1000;
    const wait = at - Date.now();
    if (wait <= 0) {
      this.endSession(s, true);
      return;
    }
    s.expiryTimer = setTimeout(() => this.endSession(s, true), Math.min(wait, 2 ** 31 - 1));
    s.expiryTimer.unref();
  }

  /**
   * The session ends: its subscriptions and held messages go, a pending will is published now [MQTT-3.1.2-8].
   * `expired`: its expiry interval ran out while offline (the subscription actors show `expired`, not `closed`).
   */
  endSession(s: MqttSession, expired = false): void {
    if (this.sessions.get(s.clientId) === s) this.sessions.delete(s.clientId);
    if (s.expiryTimer) clearTimeout(s.expiryTimer);
    s.expiryTimer = undefined;
    if (s.willTimer) {
      clearTimeout(s.willTimer);
      s.willTimer = undefined;
    }
    if (s.pendingWill) {
      const w = s.pendingWill;
      s.pendingWill = undefined;
      this.publishWill(w.will, w.origin, s.clientId);
    }
    const engine = this.host.engine();
    if (engine !== undefined && !engine.isClosed) engine.closeSession(s.sessionId, { expired });
    dropSessionState(engine, s);
    s.subs.clear();
    s.outbound.clear();
    s.redeliver.clear();
    s.reserved.clear();
    s.inbound.clear();
    s.released.clear();
    s.blocked.clear();
    this.forget(s);
    this.cluster?.ended(s);
  }

  /**
   * A durable subscription ended from outside its session (the queue it consumed from was deleted, and the engine
   * unsubscribed it): a session that still lists it drops it, and its saved record with it, so a restart makes
   * neither the subscription nor the queue again. The session's own UNSUBSCRIBE and its end remove the entry (or the
   * session from `sessions`) before the engine's notice, so they find nothing here.
   */
  subscriptionEnded(sub: Subscription): void {
    if (!sub.sessionId.startsWith('mqtt:')) return;
    const s = this.sessions.get(sub.sessionId.slice('mqtt:'.length));
    if (s === undefined || s.subs.get(sub.filter)?.sub !== sub) return;
    s.subs.delete(sub.filter);
    this.save(s);
  }

  /** Publish a will message now, or after its delay unless the session comes back first [MQTT-3.1.3-9]. */
  scheduleWill(s: MqttSession, will: WillMessage, origin: string): void {
    const delay = Math.min(will.delay, s.expiry);
    if (delay <= 0 || !this.sessions.has(s.clientId)) {
      this.publishWill(will, origin, s.clientId);
      return;
    }
    s.pendingWill = { will, origin, dueAt: Date.now() + delay * 1000 };
    this.armWill(s);
    this.save(s); // a pending will survives a broker restart
  }

  /** Publish the pending will at its due time (now if that has passed). */
  private armWill(s: MqttSession): void {
    const w = s.pendingWill;
    if (!w) return;
    if (s.willTimer) clearTimeout(s.willTimer);
    const fire = () => {
      s.willTimer = undefined;
      const pending = s.pendingWill;
      s.pendingWill = undefined;
      if (pending) {
        this.publishWill(pending.will, pending.origin, s.clientId);
        this.save(s);
      }
    };
    const wait = w.dueAt - Date.now();
    if (wait <= 0) {
      fire();
      return;
    }
    s.willTimer = setTimeout(fire, Math.min(wait, 2 ** 31 - 1));
    s.willTimer.unref();
  }

  /** A new connection took the session over: a delayed will is not sent [MQTT-3.1.3-9]. */
  cancelWill(s: MqttSession): void {
    if (s.willTimer) clearTimeout(s.willTimer);
    s.willTimer = undefined;
    if (s.pendingWill) {
      s.pendingWill = undefined;
      this.save(s);
    }
  }

  /**
   * Publish a will now. In cluster mode the will registry decides first (`clientId`): the cluster may have published
   * it already (this node was declared gone), so it is published here only once its record is removed.
   */
  publishWill(will: WillMessage, origin: string, clientId?: string): void {
    if (clientId !== undefined && this.wills?.publishing(clientId, () => this.publishWill(will, origin))) return;
    const engine = this.host.engine();
    if (engine === undefined || engine.isClosed) return;
    const p = will.properties ?? {};
    const init: MessageInit = {
      payload: will.payload,
      qos: will.qos,
      retain: will.retain,
      contentType: p.contentType,
      responseTopic: p.responseTopic,
      correlationData: p.correlationData,
      userProperties: p.userProperties,
      payloadFormat: p.payloadFormatIndicator === 1 ? 1 : p.payloadFormatIndicator === 0 ? 0 : undefined,
      expiresAt: p.messageExpiryInterval !== undefined ? Date.now() + p.messageExpiryInterval * 1000 : undefined,
    };
    engine.publish(will.topic, init, { origin }).catch((err: unknown) => this.log.warn({ err, topic: will.topic }, 'will message not published'));
  }

  // ------------------------------------------------------------------------------------------------------------
  // Persistence: session records are written on lifecycle changes, batched per tick.

  save(s: MqttSession): void {
    if (s.persistent) this.cluster?.saved(s);
    if (this.host.sessions === undefined || !s.persistent) return;
    this.deleted.delete(s.clientId);
    this.dirty.add(s);
    this.scheduleFlush();
  }

  forget(s: MqttSession): void {
    if (this.host.sessions === undefined) return;
    this.dirty.delete(s);
    this.deleted.add(s.clientId);
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.closed) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flushing = this.flushing.then(() => this.writeDirty());
    });
  }

  private async writeDirty(): Promise<void> {
    const store = this.host.sessions;
    if (store === undefined) return;
    const ops: Array<{ type: 'put'; key: string; value: Buffer } | { type: 'del'; key: string }> = [];
    for (const id of this.deleted) ops.push({ type: 'del', key: `mqtt:${id}` });
    this.deleted.clear();
    for (const s of this.dirty) ops.push({ type: 'put', key: `mqtt:${s.clientId}`, value: Buffer.from(JSON.stringify(s.record())) });
    this.dirty.clear();
    if (ops.length === 0) return;
    try {
      await store.batch(ops);
    } catch (err) {
      this.log.error({ err }, 'MQTT sessions could not be written to the store');
    }
  }

  /** Write what is pending (shutdown). */
  async flush(): Promise<void> {
    this.flushScheduled = false;
    this.flushing = this.flushing.then(() => this.writeDirty());
    await this.flushing;
  }

  /** Server stop: timers go (sessions stay in the store for the next boot). */
  async close(): Promise<void> {
    for (const s of this.sessions.values()) {
      if (s.expiryTimer) clearTimeout(s.expiryTimer);
      if (s.willTimer) clearTimeout(s.willTimer);
      s.expiryTimer = s.willTimer = undefined;
      if (s.persistent) {
        s.disconnectedAt ??= Date.now();
        this.dirty.add(s);
      }
    }
    await this.flush();
    this.faults.close();
    this.closed = true;
  }

  /**
   * A user was deleted: its live connections close (v5: DISCONNECT 0x98 Administrative action, with a Reason String)
   * and every session kept under its user name is discarded with its subscriptions and held messages. Wills are
   * dropped, not published: nothing is published on behalf of a user that no longer exists.
   */
  endUser(uniqueId: string, username: string): { connections: number; sessions: number } {
    let connections = 0;
    for (const c of [...this.connections.values()]) {
      if (c.principal?.uniqueId !== uniqueId || c.state === 'closed') continue;
      c.will = undefined;
      c.close(CloseReason.UserDeleted, Reason.AdministrativeAction, `user ${username} was deleted`);
      connections++;
    }
    let sessions = 0;
    for (const s of [...this.sessions.values()]) {
      if (s.username !== username || s.conn !== undefined) continue; // a session in use now belongs to someone else
      s.pendingWill = undefined;
      this.endSession(s);
      sessions++;
    }
    if (connections || sessions) this.log.info({ username, connections, sessions }, 'MQTT connections and sessions of a deleted user ended');
    return { connections, sessions };
  }

  /** Subscriptions of a session, for the REST connection view. */
  subscriptionsOf(s: MqttSession): Subscription[] {
    return [...s.subs.values()].map((x) => x.sub);
  }
}
