/**
 * Writes the hand-made seed inputs of fuzz/corpus/<target>/ (valid packets in each target's input layout, see
 * fuzz/targets.ts): `npx tsx fuzz/seeds.ts`. The corpus also keeps inputs jsfuzz found (`npm run fuzz -- --save`).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import mqttPacket from 'mqtt-packet';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), 'corpus');
const gen = (p: Record<string, unknown>, v: 4 | 5): Buffer => mqttPacket.generate(p as never, { protocolVersion: v } as never);
/** The body of a packet (after its fixed header). */
const body = (b: Buffer): Buffer => {
  let off = 1;
  while (b[off]! & 0x80) off++;
  return b.subarray(off + 1);
};
const PROPS = { userProperties: { a: 'b', c: ['d', 'e'] }, contentType: 'text/plain', responseTopic: 'r/t', correlationData: Buffer.from('c'), payloadFormatIndicator: true, messageExpiryInterval: 30 };

const seeds: Record<string, Buffer[]> = { publish: [], ack: [], properties: [], framer: [], scanner: [] };
for (const v of [4, 5] as const) {
  for (const qos of [0, 1, 2] as const) {
    const p = gen({ cmd: 'publish', topic: qos === 2 ? 'a/ü/c' : 'a/b', payload: Buffer.from('hello'), qos, messageId: 7, retain: qos === 1, dup: false, ...(v === 5 ? { properties: qos === 0 ? PROPS : { topicAlias: 3 } } : {}) }, v);
    seeds.publish!.push(Buffer.concat([Buffer.from([(v === 5 ? 1 : 0) | ((p[0]! & 0x0f) << 1)]), body(p)]));
  }
  for (const [i, cmd] of (['puback', 'pubrec', 'pubrel', 'pubcomp'] as const).entries()) {
    const a = gen({ cmd, messageId: 9, ...(v === 5 ? { reasonCode: cmd === 'pubrel' || cmd === 'pubcomp' ? 0x92 : 0x10, properties: { reasonString: 'why', userProperties: { k: 'v' } } } : {}) }, v);
    seeds.ack!.push(Buffer.concat([Buffer.from([i | (v === 5 ? 4 : 0) | ((a[0]! & 0x0f) << 4)]), body(a)]));
  }
}
/** Property blocks, Property Length first. */
const block = (...props: Buffer[]): Buffer => {
  const b = Buffer.concat(props);
  return Buffer.concat([Buffer.from([b.length]), b]);
};
const str = (s: string): Buffer => Buffer.concat([Buffer.from([0, Buffer.byteLength(s)]), Buffer.from(s)]);
const user = Buffer.concat([Buffer.from([0x26]), str('k'), str('v')]);
const blocks: Buffer[][] = [
  [block(Buffer.from([0x11, 0, 0, 0, 60]), Buffer.from([0x21, 0, 10]), Buffer.from([0x22, 0, 5]), Buffer.from([0x27, 0, 1, 0, 0]), user), block(Buffer.from([0x15]), str('SCRAM'), Buffer.from([0x16]), str('data'))],
  [block(Buffer.from([0x18, 0, 0, 0, 5]), Buffer.from([0x01, 1]), Buffer.from([0x02, 0, 0, 0, 9]), Buffer.from([0x03]), str('t/p'), user)],
  [block(Buffer.from([0x0b, 0x81, 0x01]), user)],
  [block(user)],
  [block(Buffer.from([0x11, 0, 0, 0, 0]), Buffer.from([0x1f]), str('bye'), user)],
  [block(Buffer.from([0x15]), str('SCRAM'), Buffer.from([0x16]), str('x'))],
  [block(Buffer.from([0x23, 0, 1]), Buffer.from([0x08]), str('r/t'), Buffer.from([0x09]), str('corr'), user)],
  [block(Buffer.from([0x1f]), str('reason'), user)],
];
blocks.forEach((bs, which) => bs.forEach((b) => seeds.properties!.push(Buffer.concat([Buffer.from([which]), b]))));
// the framer: a CONNECT-less stream of what a connected client sends, both versions, stride 3
for (const v of [4, 5] as const) {
  const stream = Buffer.concat([
    gen({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'a/#', qos: 1 }] }, v),
    gen({ cmd: 'publish', topic: 'a/b', payload: Buffer.alloc(200, 7), qos: 1, messageId: 2, retain: false, dup: false }, v),
    gen({ cmd: 'puback', messageId: 3 }, v),
    gen({ cmd: 'pubrel', messageId: 4 }, v),
    gen({ cmd: 'unsubscribe', messageId: 5, unsubscriptions: ['a/#'] }, v),
    gen({ cmd: 'pingreq' }, v),
    gen({ cmd: 'disconnect' }, v),
  ]);
  seeds.framer!.push(Buffer.concat([Buffer.from([(v === 5 ? 1 : 0) | (2 << 1)]), stream]));
}
// the bridge's scanner: what a remote broker sends its client, stride 5, maximum packet sizes 4096 and 64
for (const v of [4, 5] as const) {
  const stream = Buffer.concat([
    gen({ cmd: 'connack', sessionPresent: true, ...(v === 5 ? { reasonCode: 0, properties: { topicAliasMaximum: 10 } } : { returnCode: 0 }) }, v),
    gen({ cmd: 'suback', messageId: 1, granted: [1] }, v),
    gen({ cmd: 'publish', topic: 'fed/a', payload: Buffer.alloc(100, 1), qos: 1, messageId: 9, retain: false, dup: false }, v),
    gen({ cmd: 'pingresp' }, v),
  ]);
  seeds.scanner!.push(Buffer.concat([Buffer.from([4]), stream]), Buffer.concat([Buffer.from([4 | (4 << 4)]), stream]));
}
for (const [target, list] of Object.entries(seeds)) {
  const dir = join(ROOT, target);
  mkdirSync(dir, { recursive: true });
  for (const s of list) writeFileSync(join(dir, `seed-${createHash('sha256').update(s).digest('hex').slice(0, 16)}`), s);
  console.log(`${target}: ${list.length} seeds`);
}
