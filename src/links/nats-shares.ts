/**
 * Shared subscriptions across brokers federated over NATS: `$share/g/t` on brokers A and B together get each
 * message once across both.
 *
 * A local shared group whose filter lies in a NATS link's namespaces (a pull linkConfig's local namespace, and a push
 * linkConfig's, so local messages reach NATS) is *external*: the engine no longer feeds it from local publishes
 * (`Engine.setExternalShares`); every broker's push sends the messages to NATS as usual, and each broker with a member
 * of the group receives as a member of one NATS-wide group — a queue group at QoS 0, one JetStream durable consumer
 * for the whole group at QoS >= 1 (`SY_share_<group>_<hash of the remote filter>`) — and hands what it gets to its
 * local group only (`Engine.publishToGroup`). A broker's own messages come back this way too (no loop: they were
 * never given to the group locally, and the outbox never sees a message handed to a group).
 *
 * While the link is down a federated group gets nothing (QoS >= 1 messages wait in the outboxes and in JetStream);
 * the group's receiver starts when the link is established and when the first local member subscribes, and stops
 * when the last one leaves. A message for a group that has no member here any more is refused, so JetStream gives it
 * to another broker of the group.
 */
import type { MessageInit } from '../engine/message.js';
import type { PublishOptions } from '../engine/engine.js';
import { IngressResult, ingress, ingressContext, refusalText, type IngressEngine } from '../engine/ingress.js';
import type { LinkMessage, ReceiveHandler, ReceiveOptions } from './transport.js';

/** What the engine offers for federated shared groups. */
export interface ShareHost {
  setExternalShares(fn: ((group: string, filter: string) => boolean) | undefined): void;
  onSharedGroup(listener: (event: 'added' | 'removed', group: string, filter: string) => void): () => void;
  publishToGroup(group: string, filter: string, destinationName: string, init: MessageInit, opts?: PublishOptions): Promise<void>;
  /** For the ingress steps (src/engine/ingress.ts). */
  publish: IngressEngine['publish'];
  checkSchema: IngressEngine['checkSchema'];
  isQueueName: IngressEngine['isQueueName'];
}

/** A transport that can stop one receiver (the NATS transport). */
export interface ShareTransport {
  receiveWithHandle(opts: ReceiveOptions, handler: ReceiveHandler): Promise<{ stop(): Promise<void> }>;
}

function canShare(t: unknown): t is ShareTransport {
  return typeof (t as Partial<ShareTransport> | undefined)?.receiveWithHandle === 'function';
}

interface LinkDirection {
  direction: 'push' | 'pull';
  localNamespace: string;
  remoteNamespace: string;
  qualityOfService: number;
}

/** The part of a link the share federation reads. */
export interface ShareLink {
  name: string;
  config: { url: string; linkConfigs: LinkDirection[] };
}

export interface ShareDeps {
  links: () => Iterable<ShareLink>;
  namespacePrefix: (ns: string) => string;
  mapTopic: (topic: string, fromNs: string, toNs: string) => string;
  metaOf: (m: LinkMessage) => Record<string, string>;
  log: { warn(obj: unknown, msg?: string): void };
  /** A QoS 0 message for a group the link's transport dropped while this broker was behind (ReceiveOptions.dropped). */
  dropped?(link: string): void;
}

/** ms before a shared group's receiver that could not start is tried again. */
const RETRY_MS = 2000;

const isNats = (url: string) => /^(nats|tls):/i.test(url);

export class SharedGroupFederation {
  private host?: ShareHost;
  private unlisten?: () => void;
  /** Local shared groups that are external: key group \0 filter. */
  private readonly groups = new Map<string, { group: string; filter: string }>();
  /** Established NATS links: name -> the transport they are established on (their actor owns it). */
  private readonly attached = new Map<string, { link: ShareLink; transport: ShareTransport }>();
  /** Running receivers: link \0 group \0 filter, with the transport they receive on. */
  private readonly receivers = new Map<string, { transport: ShareTransport; stop: Promise<(() => Promise<void>) | undefined> }>();

  constructor(private readonly deps: ShareDeps) {}

  private within(filter: string, ns: string): boolean {
    const prefix = this.deps.namespacePrefix(ns);
    return prefix === '' || filter.startsWith(prefix) || filter === prefix.replace(/\/$/, '');
  }

  /** The NATS link and pull linkConfig that federate a shared group with this filter, if any. */
  coverage(filter: string): { link: ShareLink; pull: LinkDirection } | undefined {
    // `$` topics (`$SYS/...`) never cross a link (every outbox refuses them): such a group stays a local one
    if (filter.charCodeAt(0) === 36 /* $ */) return undefined;
    for (const link of this.deps.links()) {
      if (!isNats(link.config.url)) continue;
      const pull = link.config.linkConfigs.find((lc) => lc.direction === 'pull' && this.within(filter, lc.localNamespace));
      const push = link.config.linkConfigs.find((lc) => lc.direction === 'push' && this.within(filter, lc.localNamespace));
      if (pull && push) return { link, pull };
    }
    return undefined;
  }

  /** After every engine start: federated groups are fed by the links only. */
  install(host: ShareHost): void {
    this.uninstall();
    this.host = host;
    host.setExternalShares((_group, filter) => this.coverage(filter) !== undefined);
    this.unlisten = host.onSharedGroup((event, group, filter) => {
      const key = `${group}\u0000${filter}`;
      if (event === 'added') {
        if (this.coverage(filter) === undefined) return;
        this.groups.set(key, { group, filter });
        for (const a of this.attached.values()) this.start(a.link.name, group, filter);
      } else if (this.groups.delete(key)) {
        for (const name of this.attached.keys()) this.stop(name, group, filter);
      }
    });
  }

  uninstall(): void {
    this.unlisten?.();
    this.unlisten = undefined;
    this.host?.setExternalShares(undefined);
    this.host = undefined;
    this.groups.clear();
  }

  /** The link is established on `transport`: start a receiver for every federated group it covers. */
  attach(link: ShareLink, transport: unknown): void {
    if (!isNats(link.config.url) || !canShare(transport)) return;
    this.attached.set(link.name, { link, transport });
    for (const { group, filter } of this.groups.values()) this.start(link.name, group, filter);
  }

  /** The link's transport is closed (its receivers with it). */
  detach(name: string): void {
    this.attached.delete(name);
    for (const key of [...this.receivers.keys()]) if (key.startsWith(`${name}\u0000`)) this.receivers.delete(key);
  }

  private start(name: string, group: string, filter: string): void {
    const a = this.attached.get(name);
    const cov = this.coverage(filter);
    if (!a || !cov || cov.link.name !== name) return;
    const key = `${name}\u0000${group}\u0000${filter}`;
    const running = this.receivers.get(key);
    if (running && running.transport === a.transport) return;
    const { pull } = cov;
    const remoteFilter = this.deps.mapTopic(filter, pull.localNamespace, pull.remoteNamespace);
    const handler: ReceiveHandler = async (m) => {
      const host = this.host;
      if (!host) throw new Error('the messaging engine is not running');
      if (!this.groups.has(`${group}\u0000${filter}`)) throw new Error(`no local member of the shared group ${group}`);
      const topic = this.deps.mapTopic(m.topic, pull.remoteNamespace, pull.localNamespace);
      const init: MessageInit = {
        payload: m.payload,
        qos: Math.min(m.qos, pull.qualityOfService) as 0 | 1 | 2,
        retain: false,
        ...(m.contentType !== undefined ? { contentType: m.contentType } : {}),
        ...(m.correlationData !== undefined ? { correlationData: m.correlationData } : {}),
        ...(m.userProperties !== undefined ? { userProperties: m.userProperties } : {}),
        ...(m.responseTopic !== undefined ? { responseTopic: m.responseTopic } : {}),
        ...(m.payloadFormat !== undefined ? { payloadFormat: m.payloadFormat } : {}),
        ...(m.priority !== undefined ? { priority: m.priority } : {}),
        ...(m.expiresAt ? { expiresAt: m.expiresAt } : {}),
        metaData: this.deps.metaOf(m),
      };
      // the one ingress path (src/engine/ingress.ts), to this group only: $SYS and the payload schema refuse for
      // good (acknowledged and dropped), a full subscription or a group with no member here leaves it to JetStream
      const cx = ingressContext(host, undefined, undefined, topic, init, { origin: `link:${name}` }, undefined, group, filter);
      const result = ingress(cx);
      if (result === IngressResult.Unavailable) throw new Error('the messaging engine is not running');
      if (result !== IngressResult.Accepted && result !== IngressResult.QuotaExceeded) {
        this.deps.log.warn({ link: name, group, topic, err: refusalText(cx, result) }, 'federated shared group: a received message was refused; dropped');
        return;
      }
      await cx.written;
    };
    const stop = a.transport
      .receiveWithHandle({ filter: remoteFilter, qos: pull.qualityOfService as 0 | 1 | 2, durableName: `share-${group}`, shareGroup: group, dropped: () => this.deps.dropped?.(name) }, handler)
      .then(
        (h) => () => h.stop(),
        (err: Error) => {
          this.receivers.delete(key);
          this.deps.log.warn({ link: name, group, filter, err: err.message }, `federated shared group: could not receive from NATS; retrying in ${RETRY_MS / 1000} s`);
          // a JetStream request that timed out on a busy server must not leave this broker's members without messages
          // for as long as the link stays established: tried again while the group and the link are still there
          setTimeout(() => {
            if (this.groups.has(`${group}\u0000${filter}`) && this.attached.get(name)?.transport === a.transport && !this.receivers.has(key)) this.start(name, group, filter);
          }, RETRY_MS).unref();
          return undefined;
        },
      );
    this.receivers.set(key, { transport: a.transport, stop });
  }

  private stop(name: string, group: string, filter: string): void {
    const key = `${name}\u0000${group}\u0000${filter}`;
    const r = this.receivers.get(key);
    if (!r) return;
    this.receivers.delete(key);
    void r.stop.then((s) => s?.()).catch(() => undefined);
  }
}
