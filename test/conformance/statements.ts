/**
 * Every numbered normative statement of MQTT 3.1.1 (OASIS Standard, 29 October 2014, appendix B) and MQTT 5.0
 * (OASIS Standard, 7 March 2019, appendix B), by id, with the control packet group it belongs to, and — for those no
 * test of ./cases proves — why it cannot be tested from outside a server with raw packets. The ids were checked
 * against the statement lists public conformance reports publish; the wording of the statements is the standard's
 * and is not reproduced here.
 */
import type { V } from './harness.js';

export interface Statement {
  id: string;
  v: V;
  group: string;
  /** set when no test proves it: why */
  untestable?: string;
}

const range = (clause: string, from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `MQTT-${clause}-${from + i}`);

/** The groups, in the standard's order: a statement goes to the first group whose clause prefixes match its id. */
const GROUPS: Array<[string, string[]]> = [
  ['data representation', ['1.']],
  ['packet format', ['2.']],
  ['CONNECT and CONNACK', ['3.1.', '3.2.', '4.1.']],
  ['PUBLISH and its acknowledgements', ['3.3.', '3.4.', '3.5.', '3.6.', '3.7.', '4.3.', '4.4.', '4.5.', '4.6.', '4.9.']],
  ['SUBSCRIBE and SUBACK', ['3.8.', '3.9.', '4.7.', '4.8.2']],
  ['UNSUBSCRIBE and UNSUBACK', ['3.10.', '3.11.']],
  ['PINGREQ, DISCONNECT, AUTH, errors', ['3.12.', '3.13.', '3.14.', '3.15.', '4.8.0', '4.12.', '4.13.']],
  ['transport', ['4.2.', '6.']],
];
export const GROUP_NAMES = GROUPS.map(([g]) => g);

function groupOf(id: string): string {
  const num = id.slice('MQTT-'.length);
  for (const [g, prefixes] of GROUPS) if (prefixes.some((p) => num.startsWith(p))) return g;
  throw new Error(`no group for ${id}`);
}

const V311 = [
  ...range('1.5.3', 1, 3),
  ...range('2.2.2', 1, 2),
  ...range('2.3.1', 1, 7),
  ...range('3.1.0', 1, 2),
  ...range('3.1.2', 1, 24),
  ...range('3.1.3', 1, 11),
  ...range('3.1.4', 1, 5),
  ...range('3.2.0', 1, 1),
  ...range('3.2.2', 1, 6),
  ...range('3.3.1', 1, 12),
  ...range('3.3.2', 1, 3),
  ...range('3.3.4', 1, 1),
  ...range('3.3.5', 1, 2),
  ...range('3.6.1', 1, 1),
  ...range('3.8.1', 1, 1),
  ...range('3.8.3', 1, 4),
  ...range('3.8.4', 1, 6),
  ...range('3.9.3', 1, 2),
  ...range('3.10.1', 1, 1),
  ...range('3.10.3', 1, 2),
  ...range('3.10.4', 1, 6),
  ...range('3.12.4', 1, 1),
  ...range('3.14.1', 1, 1),
  ...range('3.14.4', 1, 3),
  ...range('4.1.0', 1, 2),
  ...range('4.3.1', 1, 1),
  ...range('4.3.2', 1, 2),
  ...range('4.3.3', 1, 2),
  ...range('4.4.0', 1, 1),
  ...range('4.5.0', 1, 2),
  ...range('4.6.0', 1, 6),
  ...range('4.7.1', 1, 3),
  ...range('4.7.2', 1, 1),
  ...range('4.7.3', 1, 4),
  ...range('4.8.0', 1, 2),
  ...range('6.0.0', 1, 4),
];

const V5 = [
  ...range('1.5.4', 1, 3),
  ...range('1.5.5', 1, 1),
  ...range('1.5.7', 1, 1),
  ...range('2.1.3', 1, 1),
  ...range('2.2.1', 2, 6),
  ...range('2.2.2', 1, 1),
  ...range('3.1.0', 1, 2),
  ...range('3.1.2', 1, 30),
  ...range('3.1.3', 1, 12),
  ...range('3.1.4', 1, 6),
  ...range('3.2.0', 1, 2),
  ...range('3.2.2', 1, 22),
  ...range('3.3.1', 1, 13),
  ...range('3.3.2', 1, 20),
  ...range('3.3.4', 1, 10),
  ...range('3.4.2', 1, 3),
  ...range('3.5.2', 1, 3),
  ...range('3.6.1', 1, 1),
  ...range('3.6.2', 1, 3),
  ...range('3.7.2', 1, 3),
  ...range('3.8.1', 1, 1),
  ...range('3.8.3', 1, 5),
  ...range('3.8.4', 1, 8),
  ...range('3.9.2', 1, 2),
  ...range('3.9.3', 1, 2),
  ...range('3.10.1', 1, 1),
  ...range('3.10.3', 1, 2),
  ...range('3.10.4', 1, 6),
  ...range('3.11.2', 1, 2),
  ...range('3.11.3', 1, 2),
  ...range('3.12.4', 1, 1),
  ...range('3.14.0', 1, 1),
  ...range('3.14.1', 1, 1),
  ...range('3.14.2', 1, 4),
  ...range('3.14.4', 1, 3),
  ...range('3.15.1', 1, 1),
  ...range('3.15.2', 1, 3),
  ...range('4.1.0', 1, 2),
  ...range('4.2.0', 1, 1),
  ...range('4.3.1', 1, 1),
  ...range('4.3.2', 1, 5),
  ...range('4.3.3', 1, 13),
  ...range('4.4.0', 1, 2),
  ...range('4.5.0', 1, 2),
  ...range('4.6.0', 1, 6),
  ...range('4.7.0', 1, 1),
  ...range('4.7.1', 1, 2),
  ...range('4.7.2', 1, 1),
  ...range('4.7.3', 1, 4),
  ...range('4.8.2', 1, 6),
  ...range('4.9.0', 1, 3),
  ...range('4.12.0', 1, 7),
  ...range('4.12.1', 1, 2),
  ...range('4.13.1', 1, 1),
  ...range('4.13.2', 1, 1),
  ...range('6.0.0', 1, 4),
];

// Why a statement is not tested from outside. Kinds: a duty of the client (the server's side of it, where it has one,
// is tested under the statement named); a server choice neither broker makes in its default configuration; state or
// timing only the implementation sees; WebSocket framing (this suite speaks MQTT over TCP).
const CLIENT = 'a duty of the client: a server cannot be tested for it';
const WEBSOCKET = 'WebSocket framing: this suite speaks MQTT over TCP (Switchyard\'s WebSocket endpoint has its own tests in test/transport)';
const ENHANCED_AUTH = 'needs an enhanced authentication method the server supports: neither broker has one in its default configuration (Switchyard\'s is tested in test/mqtt/enhanced-auth.test.ts)';

const UNTESTABLE: Record<'4' | '5', Record<string, string>> = {
  '4': {
    'MQTT-2.3.1-2': CLIENT,
    'MQTT-2.3.1-3': CLIENT,
    'MQTT-3.1.2-12': 'a will that does not exist cannot be watched for: there is no will topic to subscribe to',
    'MQTT-3.1.2-23': `${CLIENT} (PINGREQ within the keep alive; the server side is MQTT-3.1.2-24)`,
    'MQTT-3.1.3-7': `${CLIENT} (the server side is MQTT-3.1.3-8)`,
    'MQTT-3.1.3-9': 'applies when the server rejects a client id it could accept otherwise: neither broker rejects one but the zero-length id of MQTT-3.1.3-8',
    'MQTT-3.3.5-2': 'needs an access control list that refuses a publish: the suite runs both brokers with anonymous access and no ACL',
    'MQTT-3.14.4-1': CLIENT,
    'MQTT-3.14.4-2': CLIENT,
    'MQTT-4.5.0-2': CLIENT,
    'MQTT-4.6.0-1': CLIENT,
    'MQTT-4.6.0-2': CLIENT,
    'MQTT-4.6.0-3': CLIENT,
    'MQTT-4.6.0-4': CLIENT,
    'MQTT-4.8.0-2': 'a transient error in the server (out of memory, a failed store) cannot be caused from outside',
    'MQTT-6.0.0-1': WEBSOCKET,
    'MQTT-6.0.0-2': WEBSOCKET,
    'MQTT-6.0.0-3': WEBSOCKET,
    'MQTT-6.0.0-4': WEBSOCKET,
  },
  '5': {
    'MQTT-3.1.2-20': `${CLIENT} (PINGREQ within the keep alive; the server side is MQTT-3.1.2-22)`,
    'MQTT-3.1.2-21': CLIENT,
    'MQTT-3.1.2-30': CLIENT,
    'MQTT-3.1.4-2': 'the checks a server may add (authentication, authorization) depend on its configuration: the suite runs both brokers with anonymous access',
    'MQTT-3.1.3-8': 'applies when the server rejects a client id: neither broker rejects one in its default configuration',
    'MQTT-3.2.2-4': CLIENT,
    'MQTT-3.2.2-5': CLIENT,
    'MQTT-3.2.2-11': CLIENT,
    'MQTT-3.2.2-12': 'applies to a server without QoS 2: both brokers support QoS 2',
    'MQTT-3.2.2-13': 'applies to a server without retained messages: both brokers support them',
    'MQTT-3.2.2-14': CLIENT,
    'MQTT-3.2.2-15': CLIENT,
    'MQTT-3.2.2-17': `${CLIENT} (the server side is MQTT-3.3.2-9)`,
    'MQTT-3.2.2-18': CLIENT,
    'MQTT-3.2.2-21': CLIENT,
    'MQTT-3.3.2-10': CLIENT,
    'MQTT-3.3.4-8': CLIENT,
    'MQTT-4.3.3-9': 'needs a PUBREC of 0x80 or more from the server: neither broker refuses a QoS 2 PUBLISH without an ACL',
    'MQTT-4.5.0-2': CLIENT,
    'MQTT-4.6.0-1': CLIENT,
    'MQTT-4.6.0-2': CLIENT,
    'MQTT-4.6.0-3': CLIENT,
    'MQTT-4.6.0-4': CLIENT,
    'MQTT-4.8.2-4': 'a QoS 2 shared delivery cut off by a disconnect: which member gets the message is the server\'s choice, so the cut cannot be aimed from outside',
    'MQTT-4.8.2-5': 'as MQTT-4.8.2-4: the member whose session ends cannot be chosen from outside',
    'MQTT-4.12.0-2': ENHANCED_AUTH,
    'MQTT-4.12.0-3': CLIENT,
    'MQTT-4.12.0-4': ENHANCED_AUTH,
    'MQTT-4.12.0-5': ENHANCED_AUTH,
    'MQTT-4.12.1-1': ENHANCED_AUTH,
    'MQTT-4.12.1-2': ENHANCED_AUTH,
    'MQTT-3.15.2-1': ENHANCED_AUTH,
    'MQTT-3.15.2-2': ENHANCED_AUTH,
    'MQTT-3.15.2-3': ENHANCED_AUTH,
    'MQTT-6.0.0-1': WEBSOCKET,
    'MQTT-6.0.0-2': WEBSOCKET,
    'MQTT-6.0.0-3': WEBSOCKET,
    'MQTT-6.0.0-4': WEBSOCKET,
  },
};

export const STATEMENTS: Statement[] = [
  ...V311.map((id) => ({ id, v: 4 as const, group: groupOf(id), ...(UNTESTABLE['4'][id] ? { untestable: UNTESTABLE['4'][id] } : {}) })),
  ...V5.map((id) => ({ id, v: 5 as const, group: groupOf(id), ...(UNTESTABLE['5'][id] ? { untestable: UNTESTABLE['5'][id] } : {}) })),
];

/** Untestable ids that are not statements (typos) — checked by catalogue.test.ts. */
export const UNTESTABLE_IDS = Object.entries(UNTESTABLE).flatMap(([v, m]) => Object.keys(m).map((id) => ({ id, v: Number(v) as V })));
