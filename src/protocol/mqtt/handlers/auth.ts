/**
 * Enhanced authentication (5 §4.12) and the AUTH packet (5 §3.15). The method is offered by the security service
 * (SCRAM-SHA-256) and by the endpoint (`authenticationMethods`).
 *
 * CONNECT with an Authentication Method → AUTH 0x18 with the server's challenge [MQTT-4.12.0-2]; the client answers
 * with AUTH 0x18 [MQTT-4.12.0-3]; then CONNACK 0x00 with the method and the server's last message, or CONNACK 0x87
 * and close [MQTT-4.12.0-4]. Until CONNACK the client may send only AUTH or DISCONNECT [MQTT-3.1.2-30]; the exchange
 * must end within the endpoint's connect timeout (the connection's CONNECT timer still runs). Every AUTH carries the
 * method of the CONNECT [MQTT-4.12.0-5]. Without a method in CONNECT there is no AUTH either way [MQTT-4.12.0-6,
 * MQTT-4.12.0-7]. Re-authentication [MQTT-4.12.1-1]: a connected client sends AUTH 0x19, the exchange runs with
 * AUTH 0x18 both ways and ends with AUTH 0x00, or DISCONNECT 0x87 and close [MQTT-4.12.1-2]; other packets keep
 * flowing meanwhile.
 */
import { AddressBlockedError } from '../../../security/address-limits.js';
import { AuthenticationFailedError, type AuthExchange, type Principal } from '../../../security/types.js';
import type { MqttConn, PendingAuth } from '../types.js';
import { CloseReason, MqttProtocolError, Reason } from '../reason.js';

const CONTINUE = 0x18;
const REAUTHENTICATE = 0x19;

export type { PendingAuth } from '../types.js';

interface AuthPacket {
  cmd: 'auth';
  reasonCode?: number;
  properties?: { authenticationMethod?: string; authenticationData?: Buffer; reasonString?: string };
}

function offered(conn: MqttConn, method: string): boolean {
  const security = conn.broker.host.security();
  return (conn.endpoint.mqtt.authenticationMethods as readonly string[]).includes(method) && (security.authenticationMethods ?? []).includes(method) && security.startExchange !== undefined;
}

function ctxOf(conn: MqttConn) {
  return { clientAddress: conn.wire.remoteAddress, protocol: 'MQTT', proxied: conn.wire.proxied === true };
}

function sendAuth(conn: MqttConn, reasonCode: number, method: string, data: Buffer): void {
  conn.sendPacket({ cmd: 'auth', reasonCode, properties: { authenticationMethod: method, authenticationData: data } });
}

/**
 * CONNECT named an Authentication Method: start the exchange (the CONNECT's will, session and the rest apply only
 * in `succeeded`). An unsupported method is refused with 0x8C [MQTT-4.12.0-1].
 */
export function beginEnhancedAuth(
  conn: MqttConn,
  method: string,
  data: Buffer | undefined,
  connectUsername: string | undefined,
  succeeded: NonNullable<PendingAuth['succeeded']>,
  refuse: NonNullable<PendingAuth['refuse']>,
): void {
  if (!offered(conn, method)) return refuse(Reason.BadAuthenticationMethod, `authentication method ${method} is not supported`);
  let exchange: AuthExchange;
  try {
    exchange = conn.broker.host.security().startExchange!(method, data, ctxOf(conn));
  } catch (err) {
    if (!(err instanceof AuthenticationFailedError)) throw err;
    conn.broker.log.info({ address: conn.wire.remoteAddress, method }, `MQTT enhanced authentication refused: ${err.message}`);
    // a blocked source address (login limits): 0x9F Connection rate exceeded, as for a password CONNECT
    return refuse(err instanceof AddressBlockedError ? Reason.ConnectionRateExceeded : Reason.NotAuthorized, err.message);
  }
  if (connectUsername !== undefined && connectUsername !== exchange.username) {
    return refuse(Reason.NotAuthorized, `the User Name in CONNECT (${connectUsername}) is not the ${method} user (${exchange.username})`);
  }
  conn.authMethod = method;
  conn.queued = undefined; // nothing is queued: only AUTH and DISCONNECT may come until CONNACK [MQTT-3.1.2-30]
  conn.authPending = { exchange, reauth: false, succeeded, refuse };
  sendAuth(conn, CONTINUE, method, exchange.challenge); // [MQTT-4.12.0-2]
}

export function handleAuth(conn: MqttConn, p: AuthPacket): void {
  if (!conn.v5) throw new MqttProtocolError(Reason.MalformedPacket, 'AUTH is not an MQTT 3.1.1 packet');
  const method = conn.authMethod;
  if (method === undefined) throw new MqttProtocolError(Reason.ProtocolError, 'AUTH without an Authentication Method in CONNECT [MQTT-4.12.0-7]');
  const rc = p.reasonCode ?? 0;
  const props = p.properties ?? {};
  if (props.authenticationMethod !== method) {
    throw new MqttProtocolError(Reason.ProtocolError, `AUTH must carry the Authentication Method of CONNECT (${method}) [MQTT-4.12.0-5, MQTT-4.12.1-1]`);
  }
  if (rc === CONTINUE) return continueAuth(conn, method, props.authenticationData ?? Buffer.alloc(0));
  if (rc === REAUTHENTICATE) return reauthenticate(conn, method, props.authenticationData);
  throw new MqttProtocolError(Reason.ProtocolError, `a client must not send AUTH with reason code 0x${rc.toString(16).padStart(2, '0')} (it answers with 0x18 or starts re-authentication with 0x19) [MQTT-4.12.0-3]`);
}

function continueAuth(conn: MqttConn, method: string, data: Buffer): void {
  const pending = conn.authPending;
  if (pending === undefined) throw new MqttProtocolError(Reason.ProtocolError, 'AUTH Continue authentication without an exchange in progress');
  conn.authPending = undefined;
  if (pending.timer) clearTimeout(pending.timer);
  let result: { principal: Principal; outcome: Buffer };
  try {
    result = pending.exchange.finish(data);
  } catch (err) {
    if (!(err instanceof AuthenticationFailedError)) throw err;
    conn.broker.log.info({ clientId: conn.clientId || undefined, username: pending.exchange.username, address: conn.wire.remoteAddress, method }, `MQTT enhanced authentication failed: ${err.message}`);
    const why = err.message;
    // the failure (lockout count) is in the store before the client hears of it, as for a password login
    void (pending.exchange.recorded?.() ?? Promise.resolve()).then(
      () => {
        if (conn.state === 'closed') return;
        if (!pending.reauth) return pending.refuse!(err instanceof AddressBlockedError ? Reason.ConnectionRateExceeded : Reason.NotAuthorized, why); // CONNACK 0x87 [MQTT-4.12.0-4]
        conn.endpoint.stats.errors++;
        conn.close(CloseReason.AuthFailed, Reason.NotAuthorized, `re-authentication failed: ${why}`); // [MQTT-4.12.1-2]
      },
      () => conn.close(CloseReason.AuthFailed, Reason.UnspecifiedError, 'authentication state could not be stored'),
    );
    return;
  }
  const ack = { authenticationMethod: method, authenticationData: result.outcome };
  if (!pending.reauth) return pending.succeeded!(result.principal, ack); // CONNACK with method and data [MQTT-4.12.0-5]
  const rt = conn.broker.host;
  if (result.principal.uniqueId !== conn.principal?.uniqueId) {
    conn.endpoint.stats.errors++;
    return conn.close(CloseReason.AuthFailed, Reason.NotAuthorized, `re-authentication must be as ${conn.principal?.username}, not as ${result.principal.username}`);
  }
  if (!rt.security().isAllowed(result.principal, 'connect', 'Server', rt.serverName)) {
    conn.endpoint.stats.errors++;
    return conn.close(CloseReason.AuthFailed, Reason.NotAuthorized, 'not authorized to connect');
  }
  conn.principal = result.principal; // group memberships as they are now
  sendAuth(conn, Reason.Success, method, result.outcome);
}

function reauthenticate(conn: MqttConn, method: string, data: Buffer | undefined): void {
  if (conn.state !== 'connected') throw new MqttProtocolError(Reason.ProtocolError, 'AUTH Re-authenticate before CONNACK [MQTT-4.12.1-1]');
  if (conn.authPending !== undefined) throw new MqttProtocolError(Reason.ProtocolError, 'AUTH Re-authenticate while an authentication exchange is in progress');
  let exchange: AuthExchange;
  try {
    exchange = conn.broker.host.security().startExchange!(method, data, ctxOf(conn));
  } catch (err) {
    if (!(err instanceof AuthenticationFailedError)) throw err;
    conn.endpoint.stats.errors++;
    return conn.close(CloseReason.AuthFailed, Reason.NotAuthorized, `re-authentication failed: ${err.message}`); // [MQTT-4.12.1-2]
  }
  const pending: PendingAuth = { exchange, reauth: true };
  // an unanswered re-authentication ends the connection after the connect timeout
  pending.timer = setTimeout(() => {
    if (conn.authPending !== pending || conn.state === 'closed') return;
    conn.authPending = undefined;
    conn.endpoint.stats.errors++;
    conn.close(CloseReason.AuthFailed, Reason.NotAuthorized, 're-authentication was not completed in time');
  }, conn.endpoint.connectTimeout);
  pending.timer.unref();
  conn.authPending = pending;
  sendAuth(conn, CONTINUE, method, exchange.challenge);
}
