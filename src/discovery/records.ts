import type { DiscoveredService, ServerFacts } from './table.js';

/**
 * What a Switchyard broker advertises and how a peer's advertisement is read back.
 *
 * The REST API is `_maps._tcp` with the TXT keys MAPS uses (maps-rest-api §13): `server name`, `schema support`,
 * `schema prefix`, `version`, `date`, `restApi=true`, `protocol=http|https`, plus `system topics` (MAPS advertises
 * `system topics = $SYS`). Each discoverable network endpoint is one more record: `_mqtt._tcp` (tcp),
 * `_secure-mqtt._tcp` (ssl), `_mqtt-ws._tcp` (ws), `_mqtt-wss._tcp` (wss), with the same server keys plus
 * `endpoint`, `protocol` (mqtt), `transport` and, for WebSocket, `path`.
 */

export const REST_TYPE = 'maps';
export const ENDPOINT_TYPES: Record<string, string> = { tcp: 'mqtt', ssl: 'secure-mqtt', ws: 'mqtt-ws', wss: 'mqtt-wss' };
/** Every DNS-SD type a Switchyard broker browses for. */
export const BROWSE_TYPES = [REST_TYPE, ...Object.values(ENDPOINT_TYPES)];
/** The key of the REST API in DiscoveredServersDTO.services. */
export const REST_SERVICE_KEY = 'restApi';

export interface AdvertisedService {
  /** Key in DiscoveredServersDTO.services: `restApi` or the endpoint name. */
  key: string;
  /** DNS-SD service type without underscore and protocol: `maps`, `mqtt`, ... */
  type: string;
  /** Instance name (at most 63 bytes, as DNS-SD allows). */
  instance: string;
  port: number;
  protocol: string;
  transport: string;
  txt: Record<string, string>;
}

export interface Advertisement {
  facts: Required<ServerFacts>;
  services: AdvertisedService[];
  /** The addresses a peer reaches us on (for NATS announcements; mDNS peers take them from the A records). */
  addresses: string[];
}

/** A DNS label holds at most 63 bytes; bonjour-service also turns dots into dashes. */
export function instanceName(text: string): string {
  let s = text.replace(/\./g, '-');
  while (Buffer.byteLength(s) > 63) s = s.slice(0, -1);
  return s;
}

export function factsTxt(f: Required<ServerFacts>): Record<string, string> {
  return {
    'server name': f.serverName,
    'system topics': f.systemTopicPrefix,
    'schema support': String(f.schemaSupport),
    'schema prefix': f.schemaPrefix,
    version: f.version,
    date: f.buildDate,
  };
}

function txtString(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (Buffer.isBuffer(v)) return v.toString('utf8');
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  return String(v);
}

/** Reads a peer's TXT record (as bonjour-service decodes it) into server facts and a DTO service; undefined when it is not a MAPS-style record. */
export function readTxt(
  type: string,
  instance: string,
  port: number,
  addresses: string[],
  txt: Record<string, unknown> | undefined,
): { facts: ServerFacts; key: string; service: DiscoveredService } | undefined {
  const props: Record<string, string> = {};
  for (const [k, v] of Object.entries(txt ?? {})) {
    const s = txtString(v);
    if (s !== undefined) props[k] = s;
  }
  const serverName = props['server name'];
  if (!serverName) return undefined; // another kind of MQTT broker on the link: not a MAPS-compatible server
  const facts: ServerFacts = { serverName };
  if (props['system topics'] !== undefined) facts.systemTopicPrefix = props['system topics'];
  if (props['schema support'] !== undefined) facts.schemaSupport = props['schema support'].toLowerCase() === 'true';
  if (props['schema prefix'] !== undefined) facts.schemaPrefix = props['schema prefix'];
  if (props.version !== undefined) facts.version = props.version;
  if (props.date !== undefined) facts.buildDate = props.date;
  const rest = type === REST_TYPE;
  const key = rest ? REST_SERVICE_KEY : (props.endpoint ?? instance);
  const transport = props.transport ?? (rest ? 'tcp' : (Object.entries(ENDPOINT_TYPES).find(([, t]) => t === type)?.[0] ?? 'tcp'));
  return { facts, key, service: { protocol: props.protocol ?? (rest ? 'http' : 'mqtt'), port, transport, addresses, properties: props } };
}
