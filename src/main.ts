import { buildApp } from './api/app.js';
import { ConfigError } from './errors.js';
import { Runtime } from './runtime/runtime.js';
import { StoreLockedError } from './store/store.js';
import { registerServices } from './runtime/services.js';

/**
 * Process entry. Exit codes: 0 clean shutdown (signal or PATCH /api/v1/server shutdown), 1 unexpected fatal error,
 * 2 configuration error, 3 data directory in use by another process, 4 REST port could not be bound,
 * 5 graceful shutdown exceeded MessageDaemon.shutdownTimeout.
 */
export const EXIT = { OK: 0, FATAL: 1, CONFIG: 2, LOCKED: 3, LISTEN: 4, SHUTDOWN_TIMEOUT: 5 } as const;

async function main(): Promise<void> {
  let rt: Runtime;
  try {
    rt = await Runtime.create();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`switchyard: configuration error: ${err.message}\n`);
      process.exit(EXIT.CONFIG);
    }
    if (err instanceof StoreLockedError) {
      process.stderr.write(`switchyard: ${err.message}\n`);
      process.exit(EXIT.LOCKED);
    }
    throw err;
  }
  registerServices(rt);
  await rt.start();
  const app = await buildApp(rt);
  const rest = rt.config.RestApi;
  let stopping = false;
  const shutdown = async (reason: string) => {
    if (stopping) return;
    stopping = true;
    rt.log.info({ reason }, 'shutting down');
    const timer = setTimeout(() => {
      process.stderr.write(`switchyard: shutdown took longer than ${rt.config.MessageDaemon.shutdownTimeout} ms; exiting\n`);
      process.exit(EXIT.SHUTDOWN_TIMEOUT);
    }, rt.config.MessageDaemon.shutdownTimeout);
    timer.unref();
    try {
      await app.close();
      await rt.stop();
    } finally {
      clearTimeout(timer);
    }
    process.exit(EXIT.OK);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  rt.on('shutdown-requested', () => void shutdown('REST request'));
  if (rest.enabled) {
    try {
      await app.listen({ port: rest.port, host: rest.hostnames, backlog: 511 });
    } catch (err) {
      process.stderr.write(`switchyard: cannot listen for REST on ${rest.hostnames}:${rest.port}: ${(err as Error).message}\n`);
      await rt.stop();
      process.exit(EXIT.LISTEN);
    }
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : rest.port;
    rt.log.info({ port, host: rest.hostnames }, `REST API listening on http://${rest.hostnames}:${port}/`);
    // A line machines can read (tests, scripts): the bound REST port.
    process.stdout.write(`SWITCHYARD_READY rest=${port}\n`);
  }

}

main().catch((err) => {
  process.stderr.write(`switchyard: fatal: ${(err as Error)?.stack ?? err}\n`);
  process.exit(EXIT.FATAL);
});
