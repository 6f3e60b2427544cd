/** Aedes (in-memory persistence) on a TCP port, for bench/mqtt: prints `AEDES_READY <port>`. */
import { createServer } from 'node:net';
import { Aedes } from 'aedes';

const broker = await Aedes.createBroker();
// TCP_NODELAY as Switchyard sets it, so latency compares brokers, not Nagle's algorithm
const server = createServer({ noDelay: true }, broker.handle);
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(`AEDES_READY ${typeof a === 'object' && a ? a.port : 0}\n`);
});
process.on('SIGTERM', () => process.exit(0));
broker.on('clientError', () => {});
broker.on('connectionError', () => {});
process.on('uncaughtException', (err) => {
  process.stderr.write(`aedes: uncaught ${err?.stack ?? err}\n`);
});
