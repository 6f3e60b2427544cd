/**
 * LoRa radios: one `lora:<name>` actor per configured `loraSerial` device under the `lora` supervisor, the RN2483
 * driver as its I/O, uplinks published into the engine and the downlink topics subscribed in the engine. The views
 * the routes serve (LoRaDeviceInfoDTO, LoRaEndPointConnectionInfoDTO) are built here from live state.
 */
import { fromCallback, fromPromise } from 'xstate';
import { loraMachine, loraStateName, type LoRaEvent, type ModemLike } from '../../../actors/lora/lora.machine.js';
import type { Subscription } from '../../engine/index.js';
import { IngressResult, ingress, ingressContext, refusalText } from '../../engine/ingress.js';
import { NotFoundError, ValidationError } from '../../errors.js';
import { defineActorKind } from '../../runtime/actor-kind.js';
import { findByName } from '../../runtime/registry.js';
import type { MessagingService } from '../../messaging/messaging.service.js';
import type { Runtime, Service } from '../../runtime/runtime.js';
import { filterOf, nodeOfTopic, type LoRaSerialDevice } from './config.js';
import { LoRaRadio, type NodeRecord, type Uplink } from './radio.js';
import { Rn2483 } from './rn2483.js';

declare module '../../runtime/registry.js' {
  interface ActorKinds {
    lora: typeof loraMachine;
  }
}

declare module '../../runtime/runtime.js' {
  interface RuntimeServices {
    lora: LoRaService;
  }
}

/** The LoRa kind (src/runtime/actor-kind.ts): `lora:<name>` under the `lora` supervisor; no REST word commands it. */
export const loraKind = defineActorKind({
  kind: 'lora',
  machine: loraMachine,
  supervisor: 'lora',
  noun: 'LoRa radio',
  stateName: (snap) => (snap.status !== 'active' ? 'Failed' : loraStateName(snap.value)),
});

export interface LoRaEndPointInfo {
  nodeId: number;
  lastRSSI: number;
  incomingQueueSize: number;
  connectionSize: number;
  lastRead: number;
  lastWrite: number;
}

export interface LoRaDeviceInfo {
  name: string;
  radio: string;
  bytesSent: number;
  bytesReceived: number;
  packetsSent: number;
  packetsReceived: number;
  endPointInfoList: LoRaEndPointInfo[];
  state: string;
  module: string;
  port: string;
  lastError?: string;
}

export interface LoRaConnectionInfo {
  rssi: number;
  missedPackets: number;
  receivedPackets: number;
  remoteNodeId: number;
  lastPacketId: number;
  lastReadTime: number;
  lastWriteTime: number;
}

/** What the LoRa service is given (src/compose.ts): uplinks go into the engine, downlinks come from it. */
export interface LoRaDeps {
  messaging: MessagingService;
}

export class LoRaService implements Service {
  readonly name = 'lora';
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: LoRaDeps) {
    this.dependsOn = Object.keys(deps);
  }

  readonly radios = new Map<string, LoRaRadio>();
  /**
   * Modem closes under way. The `lora:<name>` actor is the modem's only owner (its `modemSession` closes it on exit);
   * the radio only transmits through it while the actor is online. `stop` waits for these.
   */
  private readonly closing = new Set<Promise<void>>();
  private subs: Subscription[] = [];
  private rt!: Runtime;

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    this.radios.clear();
    for (const d of rt.config.LoRaDeviceManager.data) this.radios.set(d.name, new LoRaRadio(d, (u) => this.publishUplink(d, u)));
  }

  running(rt: Runtime): void {
    const engine = this.deps.messaging.engine;
    const cfg = rt.config.LoRaDeviceManager;
    for (const radio of this.radios.values()) {
      if (engine) {
        this.subs.push(
          engine.subscribe({
            sessionId: `lora:${radio.name}`,
            filter: filterOf(radio.topics.downlink),
            retainHandling: 2, // a retained message is not a new downlink
            sink: {
              kind: 'push',
              deliver: (_sub, msg, destinationName) => {
                const node = nodeOfTopic(radio.topics.downlink, destinationName);
                if (node !== undefined) radio.enqueue(node, msg.payload);
                return true;
              },
            },
          }),
        );
      }
      loraKind.spawn(rt, radio.name, { logic: this.logic(radio), input: { name: radio.name, retryInitial: cfg.retryInitial, retryMax: cfg.retryMax } });
    }
  }

  async stop(): Promise<void> {
    const engine = this.deps.messaging.engine;
    for (const s of this.subs.splice(0)) if (engine) engine.unsubscribe(s);
    for (const r of this.radios.values()) r.stop();
    await Promise.all([...this.closing]);
  }

  private logic(radio: LoRaRadio) {
    const cfg = this.rt.config.LoRaDeviceManager;
    const d = radio.config;
    const log = this.rt.log.child({ actor: 'lora', id: radio.name });
    return loraMachine.provide({
      actors: {
        openModem: fromPromise<ModemLike, { name: string }>(async ({ signal }) => {
          let modem: Rn2483;
          try {
            modem = await Rn2483.open({
              path: d.serialConfig.port,
              baudRate: d.serialConfig.baudRate,
              dataBits: d.serialConfig.dataBits,
              stopBits: d.serialConfig.stopBits,
              parity: d.serialConfig.parity,
              flowControl: d.serialConfig.flowControl,
              commandTimeout: cfg.commandTimeout,
              healthCheckInterval: d.healthCheckInterval,
              settings: {
                frequencyHz: Math.round(d.frequency * 1e6),
                power: d.power,
                spreadingFactor: d.spreadingFactor,
                bandwidth: d.bandwidth,
                codingRate: d.codingRate,
                syncWord: d.syncWord,
              },
            });
          } catch (err) {
            log.warn({ port: d.serialConfig.port, err: (err as Error).message }, `LoRa radio ${radio.name} could not be opened; retrying with backoff`);
            throw err;
          }
          if (signal.aborted) {
            await modem.close();
            throw new Error('open cancelled');
          }
          radio.module = modem.version;
          modem.onPacket((p) => radio.received(p));
          modem.onLost((reason) => {
            radio.attach(undefined);
            if (reason !== 'closed') log.warn({ port: d.serialConfig.port, reason }, `LoRa radio ${radio.name} lost its modem: ${reason}`);
          });
          radio.attach(modem);
          log.info({ port: d.serialConfig.port, module: modem.version, frequency: d.frequency }, `LoRa radio ${radio.name} online (${modem.version})`);
          return modem;
        }),
        // the machine's session, plus: the radio stops transmitting through the modem, and `stop` waits for the close
        modemSession: fromCallback<LoRaEvent, { modem: ModemLike }>(({ input, sendBack }) => {
          input.modem.onLost((reason) => sendBack({ type: 'modem.lost', reason }));
          return () => {
            radio.attach(undefined);
            const p = input.modem.close().catch(() => {});
            this.closing.add(p);
            void p.finally(() => this.closing.delete(p));
          };
        }),
      },
    });
  }

  private publishUplink(d: LoRaSerialDevice, u: Uplink): void {
    const engine = this.deps.messaging.engine;
    if (!engine) return;
    const metaData: Record<string, string> = {
      loraRadio: d.name,
      loraNode: String(u.frame.from),
      loraTo: String(u.frame.to),
      loraPacketId: String(u.frame.id),
      loraFlags: String(u.frame.flags),
    };
    if (u.rssi !== undefined) metaData.loraRssi = String(u.rssi);
    if (u.snr !== undefined) metaData.loraSnr = String(u.snr);
    // the one ingress path (src/engine/ingress.ts): the radio is configured, so no ACL; $SYS, the payload schema and
    // flow control apply as to any publisher
    const cx = ingressContext(engine, undefined, undefined, u.topic, { payload: u.frame.payload, contentType: 'application/octet-stream', metaData }, { origin: `lora:${d.name}` });
    const result = ingress(cx);
    if (result !== IngressResult.Accepted) {
      this.rt.log.debug({ topic: u.topic, err: refusalText(cx, result) }, 'LoRa uplink refused');
      return;
    }
    cx.written!.catch((err) => {
      this.rt.log.debug({ err, topic: u.topic }, 'LoRa uplink publish failed');
    });
  }

  // ------------------------------------------------------------------------------------------------------------
  // Views

  /** By name (exact first, then case-insensitive); 400 blank, 404 unknown. */
  find(name: string): LoRaRadio {
    const n = name.trim();
    if (!n) throw new ValidationError('Device name must not be blank');
    const found = findByName(this.radios, n);
    if (found) return found;
    throw new NotFoundError('LoRa device not found');
  }

  state(radio: LoRaRadio): { state: string; lastError?: string } {
    const a = loraKind.lookup(this.rt, radio.name);
    if (!a) return { state: 'Stopped' };
    const snap = a.getSnapshot();
    if (snap.status !== 'active') return { state: 'Failed' };
    return { state: loraStateName(snap.value), ...(snap.context.lastError ? { lastError: snap.context.lastError } : {}) };
  }

  deviceInfo(radio: LoRaRadio): LoRaDeviceInfo {
    const { state, lastError } = this.state(radio);
    return {
      name: radio.name,
      radio: 'Serial',
      bytesSent: radio.bytesSent,
      bytesReceived: radio.bytesReceived,
      packetsSent: radio.packetsSent,
      packetsReceived: radio.packetsReceived,
      endPointInfoList: [...radio.nodes.values()].map((n) => ({
        nodeId: n.nodeId,
        lastRSSI: n.lastRSSI,
        incomingQueueSize: radio.queued(n.nodeId),
        connectionSize: 1,
        lastRead: n.lastReadTime,
        lastWrite: n.lastWriteTime,
      })),
      state,
      module: radio.module,
      port: radio.config.serialConfig.port,
      ...(lastError ? { lastError } : {}),
    };
  }

  devices(): LoRaDeviceInfo[] {
    return [...this.radios.values()].map((r) => this.deviceInfo(r));
  }

  /**
   * The connections of a node id: a node heard on the radio → its one entry; the radio's own address → every node
   * heard (MAPS: the connections of the local endpoint); otherwise 404.
   */
  connections(radio: LoRaRadio, nodeId: number): LoRaConnectionInfo[] {
    const conn = (n: NodeRecord): LoRaConnectionInfo => ({
      rssi: n.lastRSSI,
      missedPackets: n.missedPackets,
      receivedPackets: n.receivedPackets,
      remoteNodeId: n.nodeId,
      lastPacketId: n.lastPacketId,
      lastReadTime: n.lastReadTime,
      lastWriteTime: n.lastWriteTime,
    });
    const node = radio.nodes.get(nodeId);
    if (node) return [conn(node)];
    if (nodeId === radio.config.address) return [...radio.nodes.values()].map(conn);
    throw new NotFoundError('LoRa endpoint not found');
  }
}

export function loraService(deps: LoRaDeps): LoRaService {
  return new LoRaService(deps);
}

/** The LoRa service of a runtime (an empty list of radios when it is not registered). */
export function loraOf(rt: Runtime): LoRaService | undefined {
  return rt.service('lora');
}
