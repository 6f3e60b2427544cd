import { z } from 'zod';
import { isAddressOrCidr } from '../transport/address-list.js';

/**
 * Configuration sections, named as in MAPS. Each section is a strict zod schema with defaults, so an unknown key
 * (a typo) stops start-up instead of being ignored. The same schemas give the JSON Schema served by
 * `GET /api/v1/server/config/{name}`.
 */

const port = z.number().int().min(0, 'a port between 0 and 65535 (0 picks a free port)').max(65535, 'a port between 0 and 65535 (0 picks a free port)');
const millis = z.number().int().nonnegative();

const addressOrCidr = z.string().max(64).refine(isAddressOrCidr, 'an IP address or CIDR range, e.g. 127.0.0.1, 10.0.0.0/8 or ::1');

export const MessageDaemonSchema = z
  .object({
    serverName: z.string().min(1).max(128).optional().describe('Unique server name; generated on first boot when absent'),
    dataDirectory: z.string().min(1).default('./data').describe('Where the store and the logs live'),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
    logEntriesInMemory: z.number().int().min(1).max(100000).default(100).describe('Entries kept for /api/v1/server/log'),
    logHistoryDays: z.number().int().min(1).max(365).default(7),
    enableSystemTopics: z.boolean().default(true),
    enableSystemStatusTopics: z.boolean().default(true),
    enableSystemTopicAverages: z.boolean().default(true),
    systemTopicInterval: z.number().int().min(100).default(10000).describe('ms between $SYS updates'),
    shutdownTimeout: z.number().int().min(100).max(600000).default(10000).describe('ms a graceful shutdown may take'),
    logMaxSize: z
      .string()
      .regex(/^\d+[KMG]$/, "a size like '100M' (K, M or G)")
      .default('100M')
      .describe('messaging.log and audit.log are rotated when they reach this size, as well as daily'),
    modelStore: z
      .object({
        enabled: z.boolean().default(true).describe('the ML model store and the model functions of selectors (false: 406 as MAPS without ML)'),
        maxModelSize: z.number().int().min(1024).max(4294967296).default(268435456).describe('largest model upload in bytes (413 beyond)'),
        maxModels: z.number().int().min(1).max(100000).default(1000).describe('most models kept'),
        trainingSamples: z.number().int().min(2).max(100000).default(100).describe('samples a selector model function collects before it trains a missing model'),
        maxEvaluationCost: z
          .number()
          .int()
          .min(100)
          .max(100000000)
          .default(100000)
          .describe('largest estimated cost of one model evaluation (k_means: centroids x dimensions; isolation_forest: trees x depth; others: numbers in the model); a costlier model is refused at upload (400) and at subscribe'),
      })
      .strict()
      .prefault({})
      .describe('ML model store under {dataDirectory}/models (docs/models.md)'),
    virtualActors: z
      .object({
        maxActive: z
          .number()
          .int()
          .min(1)
          .max(1000000)
          .default(1000)
          .describe('activated (XState) instances per virtual actor kind (destination, subscription); at the cap an activation first passivates the least recently used one at rest (docs/runtime.md)'),
      })
      .strict()
      .prefault({})
      .describe('virtual destination and subscription actors (docs/runtime.md)'),
    supervisor: z
      .object({
        intensity: z.number().int().min(0).default(5).describe('restarts allowed within period'),
        period: millis.default(60000),
        backoffInitial: millis.default(200),
        backoffMax: millis.default(10000),
        escalation: z
          .object({
            intensity: z.number().int().min(0).default(3).describe('subtree restarts the server makes within period before it goes degraded'),
            period: millis.default(600000),
            backoffInitial: millis.default(5000).describe('ms before the server restarts a failed subtree (doubling per attempt)'),
            backoffMax: millis.default(60000),
          })
          .strict()
          .prefault({})
          .describe('what the server does when a supervisor spends its restart budget (docs/runtime.md)'),
      })
      .strict()
      .prefault({}),
  })
  .strict();

/** SslConfigDTO, with PEM files (keyFile, certFile, caFile) as Node's TLS uses them. */
export const SslConfigSchema = z
  .object({
    keyFile: z.string().min(1).describe('PEM private key path'),
    certFile: z.string().min(1).describe('PEM certificate (chain) path'),
    caFile: z.string().min(1).optional().describe('PEM CA bundle for client certificates'),
    passphrase: z.string().optional(),
    clientCertificateRequired: z.boolean().default(false),
    clientCertificateWanted: z.boolean().default(false),
    context: z.string().default('TLS'),
  })
  .strict();

export const RestApiSchema = z
  .object({
    enabled: z.boolean().default(true),
    enableAuthentication: z.boolean().default(true),
    hostnames: z.string().min(1).default('0.0.0.0'),
    port: port.default(8080),
    enableSwagger: z.boolean().default(true),
    enableSwaggerUI: z.boolean().default(true),
    enableConsole: z.boolean().default(true).describe('the web console at /console/ (and / redirecting there), built into dist/console by npm ci / npm run build (docs/console.md)'),
    enableUserManagement: z.boolean().default(true),
    enableSchemaManagement: z.boolean().default(true),
    enableInterfaceManagement: z.boolean().default(true),
    enableDestinationManagement: z.boolean().default(true),
    enableCache: z.boolean().default(true),
    cacheLifetime: millis.default(30000),
    cacheCleanup: z.number().int().min(100).default(10000),
    enableWadlEndPoint: z.boolean().default(true),
    inactiveTimeout: z.number().int().min(10000).default(180000),
    persistentSessionExpiry: z
      .number()
      .int()
      .min(10000)
      .default(86400000)
      .describe('ms; how long the messaging state of a persistent REST login (LoginRequest.persistent) is kept after logout or idle timeout'),
    maxEventsPerDestination: z.number().int().min(1).max(100000).default(10),
    bodyLimit: z.number().int().min(1024).max(1073741824).default(1048576).describe('largest request body in bytes'),
    requestTimeout: z
      .number()
      .int()
      .min(1000)
      .max(3600000)
      .default(30000)
      .describe('ms; a request whose headers and body have not all arrived within this is answered 408 and its connection closed'),
    maxSlowRequestsPerAddress: z
      .number()
      .int()
      .min(1)
      .max(100000)
      .default(16)
      .describe('requests from one client address whose body is still arriving, at most at a time; one more is answered 429 and closed'),
    sseTokenLifetime: z.number().int().min(1000).default(60000),
    corsHeaders: z.record(z.string(), z.string()).default({}),
    trustedProxies: z
      .array(addressOrCidr)
      .max(1000)
      .default([])
      .describe(
        'addresses or CIDR ranges of reverse proxies whose X-Forwarded-For / Forwarded header is believed: the client is the rightmost address not in this list (docs/security.md "Behind a proxy"); default none: the socket peer is the client',
      ),
    trustedProxyHeader: z
      .enum(['X-Forwarded-For', 'Forwarded'])
      .default('X-Forwarded-For')
      .describe('the header the trusted proxies write (the other one is ignored: a client could send it through the proxy untouched)'),
    metricsAuthentication: z.boolean().default(false).describe('GET /metrics needs credentials and view_stats (default: open, as Prometheus scrapes)'),
    metricsTopDestinations: z
      .number()
      .int()
      .min(0)
      .max(1000)
      .default(20)
      .describe('per-destination series on /metrics for at most this many destinations (the most published to); 0 = none'),
    sslConfig: SslConfigSchema.optional().describe('HTTPS for the REST API: PEM keyFile and certFile (as the ssl:// and wss:// endpoints); absent: plain HTTP'),
  })
  .strict();

/** MqttConfigDTO (reference 4.6): limits of the MQTT protocol on one endpoint. */
export const MqttConfigSchema = z
  .object({
    type: z.literal('mqtt'),
    minServerKeepAlive: z.number().int().min(0).max(65535).default(0).describe('s; v5 clients asking for less get this (Server Keep Alive)'),
    maxServerKeepAlive: z.number().int().min(0).max(65535).default(60).describe('s; v5 clients asking for more (or 0) get this; 0 = no limit'),
    maximumSessionExpiry: z.number().int().min(0).max(4294967295).default(86400).describe('s; longest session kept after a disconnect'),
    maximumBufferSize: z.number().int().min(64).max(268435460).default(10485760).describe('largest MQTT packet accepted, bytes'),
    serverReceiveMaximum: z.number().int().min(1).max(65535).default(10).describe('QoS 1/2 publishes a v5 client may have unacknowledged'),
    clientReceiveMaximum: z.number().int().min(1).max(65535).default(65535).describe('cap on QoS 1/2 messages in flight to a client'),
    clientMaximumTopicAlias: z
      .number()
      .int()
      .min(0)
      .max(65535)
      .default(32767)
      .describe("most topic aliases the server assigns toward a v5 client (also capped by the client's Topic Alias Maximum); 0 = none"),
    serverMaximumTopicAlias: z.number().int().min(0).max(65535).default(0).describe('Topic Alias Maximum announced to v5 clients'),
    strictClientId: z.boolean().default(false).describe('refuse client ids outside [0-9a-zA-Z], 1..23 characters'),
    responseInformationPrefix: z
      .string()
      .max(1000)
      .refine((v) => !/[+#\u0000]/.test(v), 'must not contain + or # (it begins a topic name)')
      .default('response/')
      .describe("v5 Response Information for a client that asks: this prefix + the client id (percent-encoded) + '/'; '' = never sent"),
    authenticationMethods: z.array(z.enum(['SCRAM-SHA-256'])).default(['SCRAM-SHA-256']).describe('MQTT 5 enhanced authentication methods offered (AUTH); [] switches enhanced authentication off'),
    proxyProtocol: z
      .boolean()
      .default(false)
      .describe(
        'tcp:// and ssl:// endpoints only: every connection starts with a PROXY protocol v1 or v2 header (from HAProxy, nginx, a load balancer) giving the real client address; a connection without a valid one is closed (docs/security.md "Behind a proxy")',
      ),
    // flow control and limits (docs/messaging.md "Flow control and limits")
    quotaExceededPolicy311: z
      .enum(['disconnect', 'drop'])
      .default('disconnect')
      .describe(
        'a 3.1.1 QoS 1/2 publish that a full subscription queue refuses (3.1.1 has no negative PUBACK): disconnect = close the publisher without acknowledging (it resends after reconnecting, nothing acknowledged is lost); drop = acknowledge and discard, counted in switchyard_messages_refused_total',
      ),
    maxPreAuthBytes: z
      .number()
      .int()
      .min(1024)
      .max(268435460)
      .default(1048576)
      .describe('bytes a connection may send before its CONNECT is accepted (CONNECT, AUTH and anything pipelined behind them); beyond it the connection is closed'),
    readTurnBytes: z
      .number()
      .int()
      .min(1024)
      .max(1048576)
      .default(16384)
      .describe(
        "bytes of one connection's read handled per turn of the event loop (the rest waits, the socket paused, while other connections go); larger: fewer, larger writes to subscribers (less CPU per message), longer waits for other clients while a publisher floods",
      ),
    writeStallTimeout: z
      .number()
      .int()
      .min(100)
      .max(3600000)
      .default(30000)
      .describe('ms a connection may keep its outbound buffer full (it is not read meanwhile); then it is disconnected (v5 DISCONNECT 0x97)'),
    maxIdleKeepAliveZero: z
      .number()
      .int()
      .min(0)
      .max(65535)
      .default(600)
      .describe('s; a 3.1.1 client with keep alive 0 that sends nothing for this long is closed; 0 = never (v5 clients get Server Keep Alive, maxServerKeepAlive)'),
    tcpKeepAlive: z
      .number()
      .int()
      .min(0)
      .max(7200)
      .default(60)
      .describe('s of socket idleness before TCP keepalive probes start (a vanished peer is then detected and closed); 0 = off'),
  })
  .strict();

/** The `ws` protocol entry: MQTT over WebSocket (subprotocol `mqtt`) on a ws:// or wss:// endpoint. */
export const WsConfigSchema = z
  .object({
    type: z.literal('ws'),
    proxyProtocol: z
      .boolean()
      .default(false)
      .refine((v) => !v, 'the PROXY protocol applies to tcp:// and ssl:// endpoints only, never to WebSocket endpoints: set proxyProtocol on the mqtt entry of a tcp:// or ssl:// endpoint'),
    paths: z
      .array(z.string().regex(/^\/\S*$/, 'a WebSocket path starts with / and has no whitespace').max(1024))
      .max(100)
      .optional()
      .describe('upgrade paths accepted (others: 404); absent or empty: any path, so mqtt.js (/) and /mqtt clients both connect'),
  })
  .strict();

/** SerialConfigDTO's `serialDevice`: one serial port (docs/devices.md "Serial endpoints and GPS"). MAPS field names. */
export const SerialDeviceSchema = z
  .object({
    serialNo: z.string().max(256).optional().describe('the device serial number (informational)'),
    port: z
      .string()
      .min(1)
      .max(1024)
      .regex(/^[^\s\u0000]+$/, 'a serial port is a device name or path without whitespace')
      .optional()
      .describe('device: a path (/dev/ttyUSB0, /dev/serial0) or a name under /dev (ttyUSB0); absent: taken from the endpoint URL'),
    baudRate: z.number().int().min(50).max(4000000).default(9600),
    dataBits: z.union([z.literal(5), z.literal(6), z.literal(7), z.literal(8)]).default(8),
    stopBits: z.union([z.literal(1), z.literal(1.5), z.literal(2)]).default(1),
    parity: z
      .string()
      .transform((v) => v.trim().toLowerCase())
      .pipe(z.enum(['n', 'e', 'o', 'm', 's', 'none', 'even', 'odd', 'mark', 'space'], 'parity is none, even, odd, mark or space (or n, e, o, m, s)'))
      .default('none'),
    flowControl: z
      .union([z.enum(['none', 'rtscts', 'xonxoff', 'NONE', 'RTSCTS', 'XONXOFF']), z.literal(0), z.literal(1), z.literal(2)])
      .default('none')
      .describe('none (0), rtscts (1: RTS/CTS hardware) or xonxoff (2: XON/XOFF software)'),
    readTimeOut: z.number().int().min(0).max(3600000).default(60000).describe('ms; accepted for MAPS compatibility (reads are event driven)'),
    writeTimeOut: z.number().int().min(0).max(3600000).default(60000).describe('ms; accepted for MAPS compatibility (an MQTT connection whose writes stall is closed after its writeStallTimeout)'),
    bufferSize: z.number().int().min(1024).max(16777216).default(262144).describe('bytes queued toward the port before writers wait (high-water mark)'),
  })
  .strict();
export type SerialDevice = z.output<typeof SerialDeviceSchema>;

/**
 * The `NMEA-0183` protocol entry: sentences read from a serial endpoint (a GPS) are checked and published as JSON,
 * one topic per sentence type (`<topicPrefix>/<talker><type>`, e.g. `nmea/GPGGA`).
 */
export const NmeaConfigSchema = z
  .object({
    type: z.literal('NMEA-0183'),
    proxyProtocol: z
      .boolean()
      .default(false)
      .refine((v) => !v, 'the PROXY protocol applies to tcp:// and ssl:// endpoints only, never to serial endpoints (a serial line has no proxy)'),
    serial: SerialDeviceSchema.optional().describe("the port's settings when endPointConfig.serialDevice is absent (MAPS NmeaConfigDTO.serial)"),
    topicPrefix: z
      .string()
      .min(1)
      .max(1000)
      .refine((v) => !/[+#\u0000]/.test(v) && !v.endsWith('/'), 'must not contain + or # nor end with /')
      .default('nmea')
      .describe('sentences are published to <topicPrefix>/<talker><type>, e.g. nmea/GPGGA'),
    sentences: z
      .array(z.string().regex(/^[A-Z0-9]{3,6}$/, 'a sentence type such as GGA or GPGGA'))
      .max(100)
      .optional()
      .describe('publish only these types (GGA matches every talker, GPGGA only GP); absent: every valid sentence'),
    maxLineLength: z.number().int().min(82).max(4096).default(256).describe('bytes; a longer line is dropped and counted (NMEA allows 82)'),
    qos: z.number().int().min(0).max(1).default(0).describe('QoS of the published messages'),
    retain: z.boolean().default(true).describe('publish retained, so a new subscriber gets the last fix at once'),
  })
  .strict();
export type NmeaConfig = z.output<typeof NmeaConfigSchema>;

export const ProtocolConfigSchema = z.discriminatedUnion('type', [MqttConfigSchema, WsConfigSchema, NmeaConfigSchema]);

/** EndPointConfigDTO / TcpConfigDTO / TlsConfigDTO. */
export const EndPointConfigSchema = z
  .object({
    type: z.enum(['tcp', 'ssl', 'ws', 'wss', 'serial']).optional().describe('defaults to the URL scheme'),
    discoverable: z.boolean().default(false),
    selectorThreadCount: z.number().int().min(1).default(2),
    serverReadBufferSize: z.number().int().min(1).default(10240),
    serverWriteBufferSize: z.number().int().min(1).default(10240),
    proxyProtocolMode: z
      .enum(['ENABLED', 'DISABLED', 'REQUIRED'])
      .default('DISABLED')
      .describe('PROXY protocol (tcp:// and ssl:// only): REQUIRED = a header must come first (as proxyProtocol: true), ENABLED = used when present'),
    allowedProxyHosts: z
      .string()
      .max(10000)
      .refine((v) => v.split(',').every((x) => x.trim() === '' || isAddressOrCidr(x.trim())), 'a comma-separated list of IP addresses or CIDR ranges')
      .optional()
      .describe('comma-separated addresses or CIDR ranges that may send a PROXY protocol header; a PROXY-protocol connection from any other peer is closed; absent: any peer'),
    connectionTimeout: z.number().int().min(100).max(3600000).default(5000).describe('ms a new connection has to send CONNECT'),
    receiveBufferSize: z.number().int().min(1).default(128000),
    sendBufferSize: z.number().int().min(1).default(128000),
    timeout: z.number().int().min(0).default(60000),
    backlog: z.number().int().min(1).max(10000).default(100),
    soLingerDelaySec: z.number().int().min(0).default(10),
    sslConfig: SslConfigSchema.optional().describe('required for ssl:// and wss://'),
    serialDevice: SerialDeviceSchema.optional().describe('serial:// endpoints: the port and its line settings (SerialConfigDTO)'),
  })
  .strict();

export const URL_PATTERN = /^(tcp|ssl|udp|dtls|ws|wss|serial):\/\/\S+$/;

/** EndPointServerConfigDTO: one network endpoint. The limits are the service specification's (Update endpoint). */
export const EndPointServerConfigSchema = z
  .object({
    schemaLoadingVersion: z.number().int().min(0).max(10).default(1),
    name: z.string().trim().min(1, 'name is required').max(256),
    url: z
      .string()
      .min(1, 'url must not be empty')
      .max(2048, 'url must be at most 2048 characters')
      .regex(URL_PATTERN, 'url must be <scheme>://<address> with scheme tcp, ssl, udp, dtls, ws, wss or serial and no whitespace'),
    endPointConfig: EndPointConfigSchema.prefault({}),
    saslConfig: z
      .object({ realmName: z.string().optional(), mechanism: z.string().optional(), identityProvider: z.string().optional(), saslEntries: z.record(z.string(), z.unknown()).optional() })
      .strict()
      .nullable()
      .optional(),
    protocolConfigs: z.array(ProtocolConfigSchema).min(1, 'protocolConfigs must name at least one protocol'),
    authenticationRealm: z.string().min(1).default('default'),
    backlog: z.number().int().min(1).max(10000).default(100),
    selectorTaskWait: z.number().int().min(1).max(1000).default(10),
    autoStart: z.boolean().default(true).describe('start the endpoint when the server boots'),
  })
  .strict()
  .superRefine((e, ctx) => {
    // the PROXY protocol is read on tcp:// and ssl:// listeners only: refused elsewhere rather than ignored
    const scheme = /^([a-z]+):/i.exec(e.url)?.[1]?.toLowerCase();
    if (scheme === 'tcp' || scheme === 'ssl') return;
    e.protocolConfigs.forEach((p, i) => {
      if (p.proxyProtocol) ctx.addIssue({ code: 'custom', path: ['protocolConfigs', i, 'proxyProtocol'], message: `the PROXY protocol is implemented on tcp:// and ssl:// endpoints only, not ${scheme}://` });
    });
    if (e.endPointConfig.proxyProtocolMode !== 'DISABLED') {
      ctx.addIssue({ code: 'custom', path: ['endPointConfig', 'proxyProtocolMode'], message: `the PROXY protocol is implemented on tcp:// and ssl:// endpoints only, not ${scheme}://` });
    }
  });
export type EndPointServerConfig = z.output<typeof EndPointServerConfigSchema>;
export type MqttConfig = z.output<typeof MqttConfigSchema>;

/** Names of the two default endpoints (SWITCHYARD_MQTT_PORT / SWITCHYARD_MQTT_WS_PORT apply to them). */
export const DEFAULT_MQTT_ENDPOINT = 'MQTT Interface';
export const DEFAULT_MQTT_WS_ENDPOINT = 'MQTT WebSocket Interface';
const defaultEndpoints = () => [
  { name: DEFAULT_MQTT_ENDPOINT, url: 'tcp://0.0.0.0:1883/', protocolConfigs: [{ type: 'mqtt' as const }] },
  { name: DEFAULT_MQTT_WS_ENDPOINT, url: 'ws://0.0.0.0:8083/mqtt', protocolConfigs: [{ type: 'mqtt' as const }, { type: 'ws' as const }] },
];

/** `scheme://host:port/path` of an endpoint URL; host `''`, `::` or `0.0.0.0` means every interface. */
export interface EndpointAddress {
  scheme: string;
  host: string;
  port: number;
  path: string;
}
export function parseEndpointUrl(url: string): EndpointAddress {
  const m = /^([a-z]+):\/\/(\[[^\]]*\]|[^/]*?)(?::(\d+))?(\/.*)?$/i.exec(url);
  if (!m) throw new Error(`url "${url}" is not <scheme>://<host>:<port>/`);
  let host = m[2] ?? '';
  if (host.startsWith('[')) host = host.slice(1, -1);
  // MAPS writes the IPv6 wildcard as tcp://:::1883/
  if (/^:+$/.test(host)) host = '::';
  const port = m[3] === undefined ? NaN : Number(m[3]);
  return { scheme: m[1]!.toLowerCase(), host, port, path: m[4] ?? '/' };
}
export function withPort(url: string, port: number, host?: string): string {
  const a = parseEndpointUrl(url);
  const h = host ?? a.host;
  const hostPart = h.includes(':') ? `[${h}]` : h;
  return `${a.scheme}://${hostPart}:${port}${a.path}`;
}

export const NetworkManagerSchema = z
  .object({
    data: z
      .array(EndPointServerConfigSchema)
      .default(() => defaultEndpoints() as never)
      .refine((list) => new Set(list.map((e) => e.name)).size === list.length, 'endpoint names must be unique'),
    retryInitial: millis.default(1000).describe('ms before the first retry of an endpoint that failed to bind'),
    retryMax: millis.default(30000).describe('longest wait between retries'),
  })
  .strict();

export const AuthManagerSchema = z
  .object({
    authenticationEnabled: z.boolean().default(true),
    authorisationEnabled: z.boolean().default(true),
    allowAnonymous: z.boolean().default(false),
    maxFailuresBeforeLock: z.number().int().min(1).default(5),
    initialLockSeconds: z.number().int().min(1).default(30),
    maxLockSeconds: z.number().int().min(1).default(900),
    failureDecaySeconds: z.number().int().default(900),
    minimumPasswordLength: z.number().int().min(1).max(1024).default(12),
    requireUpperCase: z.boolean().default(false),
    requireLowerCase: z.boolean().default(false),
    requireDigit: z.boolean().default(false),
    requireSpecial: z.boolean().default(false),
    requireCurrentPassword: z.boolean().default(true),
    loginRateLimit: z.number().int().min(1).max(100000).default(30).describe('login attempts per client address per minute (POST /api/v1/login); more: 429'),
    addressFailureLimit: z
      .number()
      .int()
      .min(1)
      .default(20)
      .describe('failed logins (any path: Basic, Bearer, cookie, POST /api/v1/login, MQTT CONNECT, SCRAM) from one source address within addressFailureWindow that block the address for addressBlockSeconds (REST 429, MQTT CONNACK 0x9F / 3.1.1 return code 3), checked before any password'),
    addressFailureWindow: z.number().int().min(1).default(60).describe('seconds over which addressFailureLimit counts'),
    addressBlockSeconds: z.number().int().min(1).default(300).describe('seconds an address stays blocked once it reached addressFailureLimit'),
    maxTrackedAddresses: z
      .number()
      .int()
      .min(1)
      .default(10000)
      .describe('source addresses remembered for login limits (IPv6 by /64); when full the one least recently failed is forgotten'),
    unknownNamesPerAddress: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(8)
      .describe('unknown user names remembered per source address (they lock there like users; they never enter the per-user lockout table)'),
    lockoutExemptAddresses: z
      .array(addressOrCidr)
      .default(['127.0.0.0/8', '::1'])
      .describe('addresses or CIDR ranges where the per-user lock does not apply (a locked user still logs in from there; failures there still count); address limits apply everywhere'),
    lockoutTableSize: z.number().int().min(1).default(10000).describe('users tracked at once by the per-user lockout (unknown names are not in it)'),
    addressAttemptLimit: z
      .number()
      .int()
      .min(1)
      .default(60)
      .describe(
        'password checks (right or wrong: MQTT CONNECT, POST /api/v1/login, uncached Basic) one source address may start within addressAttemptWindow; beyond it a login is refused at once, without a hash (REST 429, MQTT CONNACK 0x9F / 3.1.1 return code 3); lockoutExemptAddresses reached directly (not through a proxy) are not limited',
      ),
    addressAttemptWindow: z.number().int().min(1).max(3600).default(10).describe('seconds over which addressAttemptLimit counts'),
    passwordHashWorkers: z
      .number()
      .int()
      .min(0)
      .max(64)
      .default(0)
      .describe('worker threads that check passwords (scrypt), apart from the thread pool the store uses; 0 = one per core but one, at least 1, at most 4'),
    passwordHashQueue: z
      .number()
      .int()
      .min(0)
      .max(100000)
      .default(128)
      .describe('password checks that may wait for a worker (about 50 ms each; a check whose client left is dropped); beyond it a login is refused at once as busy (REST 503, MQTT CONNACK 0x89 / 3.1.1 return code 3)'),
  })
  .strict();

export const DestinationManagerSchema = z
  .object({
    queuePrefixes: z.array(z.string().min(1)).default(['queue/', '/queue/']).describe('names starting with one of these are queues'),
    data: z
      .array(
        z
          .object({
            name: z.string().min(1),
            type: z.enum(['Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue']).default('Topic'),
            schemaEnforcement: z.enum(['off', 'warn', 'reject']).optional().describe("payload schema enforcement on this destination (overrides the schema's label and the default)"),
          })
          .strict(),
      )
      .default([]),
    expirySweepInterval: z.number().int().min(100).default(1000),
    idleTimeout: millis
      .default(300000)
      .describe('ms after which a topic with no subscription, no retained and no stored message is removed (engine entry and actor); 0 = never'),
    maxQueuedMessages: z
      .number()
      .int()
      .min(1)
      .max(10000000)
      .default(10000)
      .describe(
        'messages one MQTT subscription may hold (queued + in flight, also while its persistent session is offline); when full, QoS 1/2 publishes that would reach it are refused (v5 PUBACK/PUBREC 0x97, REST 429) and QoS 0 copies replace the oldest QoS 0 copy',
      ),
    maxQueuedBytes: z
      .number()
      .int()
      .min(1024)
      .max(1073741824)
      .default(8388608)
      .describe(
        'bytes one subscription (MQTT, REST, SSE, link outbox) may hold, queued + in flight, counted as payload, correlation data and properties + 512 per message; reached, the subscription is full as at its message cap (MQTT: QoS 1/2 publishes that would reach it are refused, QoS 0 copies replace the oldest QoS 0 copies; REST/SSE: new messages are dropped)',
      ),
    schemaEnforcement: z
      .enum(['off', 'warn', 'reject'])
      .default('reject')
      .describe("what a payload that does not match its destination's schema gets, unless the schema's label `enforcement` or the destination says otherwise (docs/schemas.md)"),
  })
  .strict();

/**
 * The configuration sections and their schemas. The core sections are declared here; the sections of the domains
 * (discovery, integrations, devices, LoRa, cluster) are registered by the composition root (src/sections.ts, imported
 * by src/compose.ts and the CLI) with `registerSections` and declared into `ConfigSections` by declaration merging,
 * so this module imports no domain.
 */
export interface ConfigSections {
  MessageDaemon: typeof MessageDaemonSchema;
  RestApi: typeof RestApiSchema;
  NetworkManager: typeof NetworkManagerSchema;
  AuthManager: typeof AuthManagerSchema;
  DestinationManager: typeof DestinationManagerSchema;
}

export type SectionName = keyof ConfigSections;

/** Every section's schema by name: the core ones now, the domains' once src/sections.ts has registered them. */
export const sectionSchemas = {
  MessageDaemon: MessageDaemonSchema,
  RestApi: RestApiSchema,
  NetworkManager: NetworkManagerSchema,
  AuthManager: AuthManagerSchema,
  DestinationManager: DestinationManagerSchema,
} as { [K in SectionName]: ConfigSections[K] };

/** The section names in registration order (the same array grows as sections are registered). */
export const sectionNames: SectionName[] = Object.keys(sectionSchemas) as SectionName[];

/** MAPS display names and class keys accepted by `GET /api/v1/server/config/{name}`. */
export const sectionAliases: Record<string, SectionName> = {
  server: 'MessageDaemon',
  messagedaemonconfig: 'MessageDaemon',
  'rest api': 'RestApi',
  restapimanagerconfig: 'RestApi',
  networks: 'NetworkManager',
  networkmanagerconfig: 'NetworkManager',
  auth: 'AuthManager',
  authmanagerconfig: 'AuthManager',
  destinations: 'DestinationManager',
  destinationmanagerconfig: 'DestinationManager',
};

/** Registers domain sections (and their MAPS aliases); a section registered twice is a programming error. */
export function registerSections(sections: Partial<{ [K in SectionName]: ConfigSections[K] }>, aliases: Record<string, SectionName> = {}): void {
  for (const [name, schema] of Object.entries(sections)) {
    if (Object.hasOwn(sectionSchemas, name)) throw new Error(`configuration section "${name}" is registered twice`);
    (sectionSchemas as Record<string, unknown>)[name] = schema;
    sectionNames.push(name as SectionName);
  }
  Object.assign(sectionAliases, aliases);
}

export type Config = { [K in SectionName]: z.output<ConfigSections[K]> };
export type MessageDaemonConfig = Config['MessageDaemon'];
export type RestApiConfig = Config['RestApi'];
