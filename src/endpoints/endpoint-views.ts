import type { ListenerLike } from '../../actors/endpoints/endpoint.machine.js';
import { parseEndpointUrl, type EndPointServerConfig } from '../config/schema.js';
import { NotFoundError } from '../errors.js';
import type { MqttBroker } from '../protocol/mqtt/broker.js';
import type { EndpointContext, EndpointStats, MqttConnection } from '../protocol/mqtt/connection.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import { isSerialEndpoint, serialDevicePath } from '../transport/serial-config.js';

/**
 * The read-only views of the network endpoints and their connections (InterfaceInfoDTO, InterfaceStatusDTO,
 * EndPointSummaryDTO, the connection details): pure functions of live state, kept apart from the endpoint
 * lifecycle (endpoints.service.ts) and the MQTT broker's ownership (mqtt-broker.service.ts). The interface and
 * connection routes and `$SYS/server/interface/status` read them.
 */
export interface EndpointViewHost {
  entries(): Iterable<EndpointEntry>;
  state(entry: EndpointEntry): EndpointState;
  broker(): MqttBroker | undefined;
}

/** What an endpoint's rates are sampled with (endpoints.service.ts). */
export interface RateSampler {
  sample(values: number[]): number[];
}

export interface EndpointEntry {
  name: string;
  uniqueId: string;
  config: EndPointServerConfig;
  ctx: EndpointContext;
  stats: EndpointStats;
  /**
   * The bound listener, read from the actor's snapshot (its only owner, which closes it on exit): undefined unless
   * the endpoint is listening. A view, never a second handle.
   */
  readonly handle: ListenerLike | undefined;
  rates: RateSampler;
}

export type EndpointState = 'Started' | 'Stopped' | 'Paused' | 'Failed' | 'Starting' | 'Stopping';

export class EndpointViews {
  constructor(private readonly host: EndpointViewHost) {}

  /** InterfaceStatusDTO of every endpoint (for `$SYS/server/interface/status` and the status routes). */
  interfaceStatuses() {
    return [...this.host.entries()].map((e) => this.interfaceStatus(e));
  }

  interfaceInfo(entry: EndpointEntry) {
    const state = this.host.state(entry);
    const live = state === 'Started' || state === 'Paused';
    // a serial endpoint has a device, not a port: `host` is serial://<device path> and `port` 0
    const serial = isSerialEndpoint(entry.config);
    const addr = serial ? { scheme: 'serial', host: serialDevicePath(entry.config), port: 0 } : parseEndpointUrl(entry.config.url);
    const port = live && entry.handle ? entry.handle.port : addr.port;
    return {
      schemaLoadingVersion: 0,
      uniqueId: entry.uniqueId,
      name: entry.name,
      port: Number.isInteger(port) ? port : 0,
      host: `${addr.scheme}://${addr.host}`,
      state,
      config: withEndpointType(entry.config) as unknown as Record<string, unknown>,
    };
  }

  interfaceStatus(entry: EndpointEntry) {
    const s = entry.stats;
    const [bo, bi, mo, mi] = entry.rates.sample([s.bytesOut, s.bytesIn, s.messagesOut, s.messagesIn]);
    const rec = (name: string, unitName: string, current: number) => ({ name, unitName, timeSpan: 1000, current, stats: {} as Record<string, number> });
    return {
      interfaceName: entry.name,
      totalBytesSent: s.bytesOut,
      totalBytesReceived: s.bytesIn,
      totalMessagesSent: s.messagesOut,
      totalMessagesReceived: s.messagesIn,
      bytesSent: bo!,
      bytesReceived: bi!,
      messagesSent: mo!,
      messagesReceived: mi!,
      connections: s.connections.size,
      errors: s.errors,
      statistics: {
        'Bytes Sent': rec('Bytes Sent', 'Bytes/s', bo!),
        'Bytes Received': rec('Bytes Received', 'Bytes/s', bi!),
        'Messages Sent': rec('Messages Sent', 'Messages/s', mo!),
        'Messages Received': rec('Messages Received', 'Messages/s', mi!),
      },
    };
  }

  connectionSummary(c: MqttConnection) {
    const secs = Math.max(1, (Date.now() - c.connectedAt) / 1000);
    return {
      id: c.id,
      adapter: c.wire.transport,
      // a serial line: serial_/dev/ttyUSB0 (its device path), not an address and port
      name: c.wire.transport === 'serial' ? `serial_${c.wire.remoteAddress}` : `${c.wire.transport}_/${c.wire.remoteAddress}:${c.wire.remotePort}`,
      user: c.principal && !c.principal.anonymous ? c.principal.username : 'anonymous',
      protocolName: c.state === 'new' ? 'Not Detected' : 'MQTT',
      protocolVersion: c.state === 'new' ? 'N/A' : c.v5 ? '5.0' : c.protocolVersion === 4 ? '3.1.1' : '3.1',
      proxyAddress: c.wire.proxyAddress ?? '', // the PROXY protocol's sender; `name` has the client's real address
      connectedTimeMs: c.connectedAt,
      lastRead: c.lastRead,
      lastWrite: c.lastWrite,
      totalBytesRead: c.bytesRead,
      totalBytesWritten: c.bytesWritten,
      totalOverflow: c.overflow,
      totalUnderflow: 0,
      bytesRead: Math.round(c.bytesRead / secs),
      bytesWritten: Math.round(c.bytesWritten / secs),
      overFlow: c.overflow,
      underFlow: 0,
      endpoint: c.endpoint.name,
      clientId: c.clientId,
    };
  }

  connections(entry?: EndpointEntry): MqttConnection[] {
    const all = entry ? [...entry.stats.connections] : [...(this.host.broker()?.connections.values() ?? [])];
    return all.sort((a, b) => a.id - b.id);
  }

  connection(id: number): MqttConnection {
    const c = this.host.broker()?.connections.get(id);
    if (!c) throw new NotFoundError(`Connection not found: no connection has id ${id}`);
    return c;
  }

  connectionDetails(c: MqttConnection) {
    const s = c.session;
    const subs = s ? [...s.subs.values()] : [];
    return {
      endPointSummary: this.connectionSummary(c),
      protocolInformation: {
        type: c.v5 ? 'mqttV5' : 'mqtt',
        sessionId: c.clientId,
        timeout: c.keepAlive * 1500,
        keepAlive: c.keepAlive,
        messageTransformationName: '',
        selectorMapping: {},
        destinationTransformationMapping: {},
        sessionInfo: {
          sessionInfo: {
            id: c.clientId,
            uniqueId: s?.sessionId ?? '',
            hasWill: c.will !== undefined,
            expiry: s?.expiry ?? 0,
            authorized: c.principal !== undefined,
            receiveMaximum: c.sendQuota,
            isRestored: false,
            resetState: false,
            persistentSession: s?.persistent ?? false,
          },
          subscriptionInfo: {
            hibernated: false,
            persistent: s?.persistent ?? false,
            sessionId: s?.sessionId ?? '',
            uniqueId: s?.sessionId ?? '',
            subscriptionContextList: subs.map(({ opts, sub }) => ({
              maxAtRest: sub.maxDepth,
              receiveMaximum: c.sendQuota,
              subscriptionId: opts.id ?? 0,
              destinationName: sub.topicFilter,
              sharedName: sub.shareGroup ?? '',
              selector: '',
              alias: opts.filter,
              acknowledgementController: opts.qos === 0 ? 'AutoAck' : 'ClientAck',
              retainHandler: ['SEND_ALWAYS', 'SEND_IF_NEW', 'DO_NOT_SEND'][opts.rh],
              qualityOfService: opts.qos,
              creditHandler: 'Client',
              destinationMode: 'NORMAL',
              noLocalMessages: opts.nl,
              retainAsPublish: opts.rap,
              allowOverlap: true,
              browser: false,
              sync: false,
            })),
            subscriptionStateList: subs.map(({ sub }) => sub.queueState()),
          },
        },
      },
    };
  }

  /** DELETE a connection: a v5 client gets DISCONNECT 0x98 (administrative action) first. */
  closeConnection(c: MqttConnection): void {
    c.close(CloseReason.AdminClose, Reason.AdministrativeAction, 'closed by an administrator');
  }
}

/**
 * MAPS's `EndPointConfigDTO.type` for an endpoint URL: the transport under it (ws:// runs over tcp, wss:// over ssl),
 * as a MAPS client reads it to pick the config class.
 */
export function endpointConfigType(url: string): string {
  const scheme = /^([a-z]+):/i.exec(url)?.[1]?.toLowerCase() ?? 'tcp';
  return scheme === 'ws' ? 'tcp' : scheme === 'wss' ? 'ssl' : scheme;
}

/** The configuration as shown: `endPointConfig.type` always present (a configured one is kept), first as in MAPS. */
function withEndpointType(config: EndpointEntry['config']) {
  const { type, ...rest } = config.endPointConfig;
  return { ...config, endPointConfig: { type: type ?? endpointConfigType(config.url), ...rest } };
}
