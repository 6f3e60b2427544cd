/**
 * bench/federation's NATS-alone subscriber in a process of its own (BENCH_FEDERATION_NATS_AS_LINK=split): a durable
 * JetStream consumer with explicit acks, as in run.ts natsJsSystem, that reports each message's latency to its
 * parent over IPC (every 20 ms). The payload starts with the parent's performance.now() at publish; both processes
 * turn their clock into epoch time with performance.timeOrigin (the same wall clock, read with sub-µs resolution), so
 * the latency is measured across the processes. Arguments: url stream durable subject parentTimeOrigin.
 */
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';

const [url, stream, durable, , origin] = process.argv.slice(2) as [string, string, string, string, string];
const parentOrigin = Number(origin);
const nc = await connect({ servers: url });
const c = await jetstream(nc).consumers.get(stream, durable);
let batch: number[] = [];
const msgs = await c.consume({
  max_messages: 512,
  callback: (m) => {
    const sent = parentOrigin + Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).readDoubleLE(0);
    batch.push(performance.timeOrigin + performance.now() - sent);
    m.ack();
  },
});
const timer = setInterval(() => {
  if (batch.length === 0) return;
  process.send!(batch);
  batch = [];
}, 20);
process.send!('ready');
process.on('disconnect', () => {
  clearInterval(timer);
  msgs.stop();
  void nc.close().then(() => process.exit(0));
});
