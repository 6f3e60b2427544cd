/**
 * Network listeners binding sockets to MQTT connections: tcp://, ssl:// (TLS), ws:// and wss:// (MQTT over
 * WebSocket, subprotocol `mqtt`, path from the endpoint URL). A listener can be paused (new connections are
 * refused, existing ones keep going) and closed (the listener and all its connections).
 */
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type BlockList, type Server as NetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket, type TlsOptions } from 'node:tls';
import { WebSocketServer, type WebSocket } from 'ws';
import { parseEndpointUrl, type EndPointServerConfig } from '../config/schema.js';
import type { MqttBroker } from '../protocol/mqtt/broker.js';
import { MqttConnection, type EndpointContext, type Wire } from '../protocol/mqtt/connection.js';
import { CloseReason, Reason } from '../protocol/mqtt/reason.js';
import { addressList, inList } from './address-list.js';
import { readProxyHeader } from './proxy-protocol.js';

export interface ListenerHandle {
  readonly transport: string;
  readonly host: string;
  /** The bound port (the real one when the URL says 0). */
  readonly port: number;
  readonly paused: boolean;
  pause(): void;
  resume(): void;
  /** Stop listening and close every connection (v5 clients get DISCONNECT 0x8B). Idempotent. */
  close(): Promise<void>;
  /** Called when the listener fails after it was bound. */
  onError(cb: (err: Error) => void): void;
}

export interface ListenerOptions {
  config: EndPointServerConfig;
  broker: MqttBroker;
  endpoint: EndpointContext;
}

const WS_HIGH_WATER = 1 << 20;

/** Where a PROXY protocol header said the client is (undefined: the socket peer is the client). */
interface ClientOrigin {
  address: string;
  port: number;
  /** A PROXY header was read (even LOCAL/UNKNOWN, which name no client): the connection came through a proxy. */
  proxied: boolean;
}

/** The one abort reason of every `closed` signal (no error object, with its stack, per connection). */
const SOCKET_CLOSED = new Error('the connection closed');

/** Aborted when the socket closes; made on first use (only a password check waiting for its turn asks for it). */
function closedSignal(socket: Socket): AbortSignal {
  if (socket.destroyed) return AbortSignal.abort(SOCKET_CLOSED);
  const ac = new AbortController();
  socket.once('close', () => ac.abort(SOCKET_CLOSED));
  return ac.signal;
}

/**
 * A TCP/TLS socket as a connection's `Wire`. A class, not an object of closures: thousands of idle connections
 * each held six closures here (and, with esbuild's keepNames, each closure's renamed `name` in its own property
 * array, about 300 bytes a closure); the methods live once on the prototype.
 */
class SocketWire implements Wire {
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly proxied: boolean;
  readonly proxyAddress: string | undefined;
  private signal: AbortSignal | undefined;
  constructor(
    private readonly socket: Socket,
    readonly transport: string,
    origin: ClientOrigin | undefined,
  ) {
    this.remoteAddress = origin?.address ?? socket.remoteAddress ?? '';
    this.remotePort = origin?.port ?? socket.remotePort ?? 0;
    this.proxied = origin?.proxied === true;
    this.proxyAddress = origin?.proxied ? `${socket.remoteAddress ?? ''}:${socket.remotePort ?? 0}` : undefined;
  }
  write(b: Buffer): boolean {
    return this.socket.write(b);
  }
  end(): void {
    this.socket.end();
  }
  destroy(): void {
    this.socket.destroy();
  }
  pause(): void {
    this.socket.pause();
  }
  resume(): void {
    this.socket.resume();
  }
  get closed(): AbortSignal {
    return (this.signal ??= closedSignal(this.socket)); // made on first use: most connections never ask
  }
}

/** The connection of a socket, for the socket's listeners below (one function each for all sockets, `this` the socket). */
const CONNECTION = Symbol('mqttConnection');
type AttachedSocket = Socket & { [CONNECTION]: MqttConnection };

function onSocketData(this: AttachedSocket, b: Buffer): void {
  this[CONNECTION].onData(b);
}
function onSocketDrain(this: AttachedSocket): void {
  this[CONNECTION].onDrain();
}
function onSocketClose(this: AttachedSocket): void {
  this[CONNECTION].onClose();
}
function ignoreSocketError(): void {
  /* 'close' follows */
}

/** TCP keepalive on every socket (a vanished peer is detected and its connection closed); MqttConfig.tcpKeepAlive s. */
function keepAlive(socket: Socket, opts: ListenerOptions): void {
  const s = opts.endpoint.mqtt.tcpKeepAlive;
  if (s > 0) socket.setKeepAlive(true, s * 1000);
}

function attachSocket(socket: Socket, transport: string, opts: ListenerOptions, origin?: ClientOrigin): void {
  socket.setNoDelay(true);
  keepAlive(socket, opts);
  const conn = new MqttConnection(opts.broker, opts.endpoint, new SocketWire(socket, transport, origin));
  (socket as AttachedSocket)[CONNECTION] = conn;
  socket.on('data', onSocketData);
  socket.on('drain', onSocketDrain);
  socket.on('close', onSocketClose);
  socket.on('error', ignoreSocketError);
  if (origin) socket.resume(); // left paused after the PROXY header (with the bytes behind it put back)
}

/** The PROXY protocol of an endpoint: off, required (`proxyProtocol: true` or REQUIRED), or used when present. */
export function proxyModeOf(config: EndPointServerConfig): 'DISABLED' | 'REQUIRED' | 'ENABLED' {
  if (config.protocolConfigs.some((p) => p.type === 'mqtt' && p.proxyProtocol)) return 'REQUIRED';
  return config.endPointConfig.proxyProtocolMode;
}

/** endPointConfig.allowedProxyHosts as a BlockList (undefined: any peer may send a header). */
function allowedProxies(config: EndPointServerConfig): BlockList | undefined {
  const raw = (config.endPointConfig.allowedProxyHosts ?? '').split(',').map((x) => x.trim()).filter(Boolean);
  if (raw.length === 0) return undefined;
  return addressList(raw, 'endPointConfig.allowedProxyHosts');
}

/**
 * A new socket on an endpoint with the PROXY protocol: only peers in allowedProxyHosts (when set) may send a
 * header; the header is read with a size cap and within the endpoint's connectionTimeout; then `next` gets the
 * socket (paused, the bytes after the header put back) and where the client is. A socket without a valid header
 * (when required), or from a peer not allowed to send one, is closed and counted as an endpoint error.
 */
function withProxyHeader(socket: Socket, mode: 'REQUIRED' | 'ENABLED', allowed: BlockList | undefined, opts: ListenerOptions, next: (origin?: ClientOrigin) => void): void {
  socket.on('error', () => {
    /* 'close' follows */
  });
  if (allowed && !inList(allowed, socket.remoteAddress)) {
    if (mode === 'ENABLED') return next(); // not a proxy: the peer is the client (a header from it is refused as MQTT)
    opts.endpoint.stats.errors++;
    socket.destroy();
    return;
  }
  readProxyHeader(socket, { required: mode === 'REQUIRED', timeoutMs: opts.endpoint.connectTimeout }).then(
    (source) => {
      if (socket.destroyed) return;
      // no header (ENABLED): the peer is the client; LOCAL / UNKNOWN: the proxy's own connection
      const headerRead = source !== undefined || mode === 'REQUIRED';
      next(headerRead ? { address: source?.address ?? socket.remoteAddress ?? '', port: source?.port ?? socket.remotePort ?? 0, proxied: true } : { address: socket.remoteAddress ?? '', port: socket.remotePort ?? 0, proxied: false });
    },
    () => {
      opts.endpoint.stats.errors++;
      socket.destroy();
    },
  );
}

function attachWebSocket(ws: WebSocket, req: IncomingMessage, transport: string, opts: ListenerOptions): void {
  const raw = req.socket;
  raw.setNoDelay(true);
  keepAlive(raw, opts);
  let closed: AbortSignal | undefined;
  const wire: Wire = {
    write: (b) => {
      ws.send(b, { binary: true });
      return ws.bufferedAmount < WS_HIGH_WATER;
    },
    end: () => ws.close(1000),
    destroy: () => ws.terminate(),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    remoteAddress: raw.remoteAddress ?? '',
    remotePort: raw.remotePort ?? 0,
    transport,
    get closed() {
      return (closed ??= closedSignal(raw));
    },
  };
  const conn = new MqttConnection(opts.broker, opts.endpoint, wire);
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (!isBinary) {
      // MQTT control packets travel in binary frames; anything else closes the connection [MQTT-6.0.0-1]
      opts.endpoint.stats.errors++;
      conn.close(CloseReason.ProtocolViolation, Reason.MalformedPacket, 'text WebSocket frame [MQTT-6.0.0-1]');
      return;
    }
    conn.onData(data);
  });
  raw.on('drain', () => conn.onDrain());
  ws.on('close', () => conn.onClose());
  ws.on('error', () => {
    /* 'close' follows */
  });
}

function tlsOptions(cfg: EndPointServerConfig): TlsOptions {
  const ssl = cfg.endPointConfig.sslConfig;
  if (!ssl) throw new Error(`endpoint "${cfg.name}": ${parseEndpointUrl(cfg.url).scheme}:// needs endPointConfig.sslConfig with keyFile and certFile`);
  const opts: TlsOptions = {
    key: readFileSync(ssl.keyFile),
    cert: readFileSync(ssl.certFile),
    passphrase: ssl.passphrase,
    requestCert: ssl.clientCertificateRequired || ssl.clientCertificateWanted,
    rejectUnauthorized: ssl.clientCertificateRequired,
  };
  if (ssl.caFile) opts.ca = readFileSync(ssl.caFile);
  return opts;
}

function listen(server: NetServer, host: string, port: number, backlog: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      server.removeListener('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      server.removeListener('error', onError);
      const a = server.address();
      resolve(typeof a === 'object' && a ? a.port : port);
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen({ port, host: host === '' ? undefined : host, backlog });
  });
}

/** Bind the endpoint's listener. Rejects when the port is in use, the certificate is unreadable or bad, or the URL is not supported. */
export async function bindListener(opts: ListenerOptions): Promise<ListenerHandle> {
  const { config } = opts;
  const addr = parseEndpointUrl(config.url);
  const scheme = addr.scheme;
  if (!['tcp', 'ssl', 'ws', 'wss'].includes(scheme)) throw new Error(`endpoint "${config.name}": ${scheme}:// endpoints are not supported by this server`);
  if (!config.protocolConfigs.some((p) => p.type === 'mqtt')) throw new Error(`endpoint "${config.name}": no supported protocol (mqtt) in protocolConfigs`);
  if (!Number.isInteger(addr.port)) throw new Error(`endpoint "${config.name}": url ${config.url} has no port`);
  const host = addr.host === '0.0.0.0' || addr.host === '::' ? addr.host : addr.host;
  let paused = false;
  let server: NetServer;
  let http: HttpServer | undefined;
  let wss: WebSocketServer | undefined;
  const sockets = new Set<Socket>();

  const proxyMode = proxyModeOf(config);
  if ((scheme === 'tcp' || scheme === 'ssl') && proxyMode !== 'DISABLED') {
    // PROXY protocol: a plain TCP listener reads the header first; for ssl:// the TLS handshake follows it (the
    // header travels in clear before TLS, as HAProxy's send-proxy sends it), on a TLS server that never listens
    const allowed = allowedProxies(config);
    const pendingTls = new Map<string, ClientOrigin | undefined>();
    const tlsServer =
      scheme === 'ssl'
        ? createTlsServer(tlsOptions(config), (tls: TLSSocket) => {
            const key = `${tls.remoteAddress}|${tls.remotePort}`;
            const origin = pendingTls.get(key);
            pendingTls.delete(key);
            attachSocket(tls, scheme, opts, origin);
          })
        : undefined;
    tlsServer?.on('tlsClientError', (_err, tls: TLSSocket) => {
      opts.endpoint.stats.errors++;
      pendingTls.delete(`${tls.remoteAddress}|${tls.remotePort}`);
    });
    server = createNetServer({ noDelay: true, pauseOnConnect: false }, (socket: Socket) => {
      if (paused) {
        socket.destroy(); // paused: refuse new connections
        return;
      }
      withProxyHeader(socket, proxyMode, allowed, opts, (origin) => {
        if (!tlsServer) return attachSocket(socket, scheme, opts, origin ?? { address: socket.remoteAddress ?? '', port: socket.remotePort ?? 0, proxied: false });
        const key = `${socket.remoteAddress}|${socket.remotePort}`;
        pendingTls.set(key, origin);
        socket.once('close', () => pendingTls.delete(key));
        tlsServer.emit('connection', socket);
        socket.resume();
      });
    });
  } else if (scheme === 'tcp' || scheme === 'ssl') {
    const onSocket = (socket: Socket) => {
      if (paused) {
        socket.destroy(); // paused: refuse new connections
        return;
      }
      attachSocket(socket, scheme, opts);
    };
    if (scheme === 'ssl') {
      server = createTlsServer(tlsOptions(config), onSocket);
      server.on('tlsClientError', () => {
        opts.endpoint.stats.errors++;
      });
    } else server = createNetServer({ noDelay: true }, onSocket);
  } else {
    http = scheme === 'wss' ? createHttpsServer(tlsOptions(config)) : createHttpServer();
    http.on('request', (_req, res) => {
      res.writeHead(426, { 'content-type': 'text/plain' }).end('MQTT over WebSocket: upgrade with subprotocol mqtt\n');
    });
    wss = new WebSocketServer({
      noServer: true,
      maxPayload: opts.endpoint.mqtt.maximumBufferSize + 8,
      perMessageDeflate: false,
      handleProtocols: (protocols) => {
        for (const p of ['mqtt', 'mqttv3.1']) if (protocols.has(p)) return p;
        return false;
      },
    });
    // Any path is accepted (mqtt.js uses `/`, others `/mqtt`) unless the `ws` protocol entry lists `paths`.
    const norm = (x: string) => (x.length > 1 ? x.replace(/\/+$/, '') : x);
    const wsPaths = config.protocolConfigs.find((p) => p.type === 'ws')?.paths;
    const allowed = wsPaths?.length ? new Set(wsPaths.map(norm)) : undefined;
    http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const reqPath = (req.url ?? '/').split('?')[0]!;
      if (paused || (allowed !== undefined && !allowed.has(norm(reqPath)))) {
        socket.end(paused ? 'HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n' : 'HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
        return;
      }
      wss!.handleUpgrade(req, socket, head, (ws) => attachWebSocket(ws, req, scheme, opts));
    });
    server = http;
  }
  // one function for every socket of this listener ('close' comes once: `on`, without a once-wrapper per socket)
  const forget = function (this: Socket): void {
    sockets.delete(this);
  };
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', forget);
  });
  const port = await listen(server, host, addr.port, config.backlog);
  const errorHandlers: Array<(err: Error) => void> = [];
  server.on('error', (err) => {
    for (const cb of errorHandlers) cb(err);
  });
  let closing: Promise<void> | undefined;
  return {
    transport: scheme,
    host,
    port,
    get paused() {
      return paused;
    },
    pause() {
      paused = true;
    },
    resume() {
      paused = false;
    },
    onError(cb) {
      errorHandlers.push(cb);
    },
    close() {
      if (closing) return closing;
      closing = new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const conn of [...opts.endpoint.stats.connections]) conn.close(CloseReason.EndpointStopped, Reason.ServerShuttingDown, 'the endpoint is stopping');
        wss?.close();
        // sockets that do not close after the DISCONNECT are cut
        const cut = setTimeout(() => {
          for (const s of sockets) s.destroy();
        }, 500);
        cut.unref();
        setTimeout(resolve, 3000).unref();
      });
      return closing;
    },
  };
}
