import { buildApp } from './api/app.js';
import { ConfigError } from './errors.js';
import { Runtime } from './runtime/runtime.js';
import { StoreLockedError } from './store/store.js';
import { registerServices } from './compose.js';
import { readiness } from './api/routes/probes/readiness.js';
import { initialAdminPassword } from './security/admin-password.js';
import { startIdleReclaim } from './runtime/reclaim.js';
import { disablePretenuring } from './runtime/pretenuring.js';
import { reloadConfig } from './runtime/reload.js';
import { restTlsOptions } from './api/https.js';
import { realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Process entry. Exit codes: 0 clean shutdown (signal or PATCH /api/v1/server shutdown), 1 unexpected fatal error,
 * 2 configuration error, 3 data directory in use by another process, 4 REST port could not be bound,
 * 5 graceful shutdown exceeded MessageDaemon.shutdownTimeout.
 */
export const EXIT = { OK: 0, FATAL: 1, CONFIG: 2, LOCKED: 3, LISTEN: 4, SHUTDOWN_TIMEOUT: 5 } as const;

/** Runs the broker in this process (`npm start`, `switchyard start`); exits the process with one of the EXIT codes. */
export async function main(): Promise<void> {
  let rt: Runtime;
  // Signals are handled from the first moment: MQTT accepts and acknowledges (sessions, subscriptions) before the
  // REST API is built, and a SIGTERM then used to end the process with acknowledged state unwritten [MQTT-4.1.0-1].
  // A shutdown asked for during start-up waits for start-up to finish (at most MessageDaemon.shutdownTimeout, else
  // exit code 5), then stops cleanly like any other.
  let requested: string | undefined;
  let startupTimer: NodeJS.Timeout | undefined;
  let onSignal = (reason: string): void => {
    if (requested !== undefined) return;
    requested = reason;
    rt?.log.info({ reason }, 'shutdown requested during start-up: stopping once started');
    const ms = rt?.config.MessageDaemon.shutdownTimeout ?? 10000;
    startupTimer = setTimeout(() => {
      process.stderr.write(`switchyard: start-up did not finish within ${ms} ms of ${reason}; exiting\n`);
      process.exit(EXIT.SHUTDOWN_TIMEOUT);
    }, ms);
    startupTimer.unref();
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
  disablePretenuring(); // short-lived message objects stay in the young generation (runtime/pretenuring.ts)
  // once idle (after start-up, after a burst) the committed V8 heap goes back to what is live (runtime/reclaim.ts)
  startIdleReclaim({
    // messages passing, however few, make the broker not idle: no forced full GC in the middle of light traffic
    activity: () => rt?.messagesPassed() ?? 0,
    onReclaim: (before, after) => rt?.log.debug({ committedBefore: before, committedAfter: after }, 'idle: heap compacted'),
    onShrinkYoung: (before, after) => rt?.log.debug({ newSpaceBefore: before, newSpaceAfter: after }, 'idle: young generation shrunk'),
  });
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
  try {
    initialAdminPassword(rt.config.AuthManager); // SWITCHYARD_ADMIN_PASSWORD[_FILE]: refused at once, not in the middle of the first boot
    restTlsOptions(rt.config.RestApi); // RestApi.sslConfig: unreadable files or a key that is not the certificate's stop here (exit 2)
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`switchyard: configuration error: ${err.message}\n`);
    await rt.stop();
    process.exit(EXIT.CONFIG);
  }
  // SIGHUP re-reads the configuration (runtime/reload.ts); one reload at a time. Installed before the boot: Node's
  // default for SIGHUP ends the process. `switchyard reload` finds this process by {data}/switchyard.pid.
  let booted!: () => void;
  let reloading: Promise<unknown> = new Promise<void>((resolve) => (booted = resolve)); // a SIGHUP during boot: applied once booted
  let afterReload = () => {};
  process.on('SIGHUP', () => {
    rt.log.info('SIGHUP: reloading the configuration');
    reloading = reloading
      .then(() => reloadConfig(rt))
      .then(() => afterReload())
      .catch((err) => rt.log.error({ err }, 'configuration reload failed'));
  });
  const pidFile = join(rt.config.MessageDaemon.dataDirectory, 'switchyard.pid');
  try {
    writeFileSync(pidFile, `${process.pid}\n`);
    process.once('exit', () => rmSync(pidFile, { force: true }));
  } catch (err) {
    rt.log.warn({ err: (err as Error).message, file: pidFile }, 'cannot write the pid file; switchyard reload will not find this process');
  }
  registerServices(rt);
  await rt.start();
  const app = await buildApp(rt);
  afterReload = () => app.apiContext.cache.clear(); // no cached view (the config API's) from before the reload
  booted();
  const rest = rt.config.RestApi;
  let stopping = false;
  let readyTimer: NodeJS.Timeout | undefined;
  const shutdown = async (reason: string) => {
    if (stopping) return;
    stopping = true;
    clearInterval(readyTimer);
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
  onSignal = (reason) => void shutdown(reason);
  if (requested !== undefined) {
    clearTimeout(startupTimer);
    await shutdown(requested); // asked for during start-up: not listening for REST, straight to a clean stop
    return;
  }
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
    rt.log.info({ port, host: rest.hostnames }, `REST API listening on ${rest.sslConfig ? 'https' : 'http'}://${rest.hostnames}:${port}/`);
    // Machine-readable lines (tests, scripts): the bound REST port as soon as it listens, then READY.
    process.stdout.write(`SWITCHYARD_LISTENING rest=${port}\n`);
  }
  const restPart = rest.enabled ? ` rest=${(app.server.address() as { port?: number } | null)?.port ?? rest.port}` : '';
  // SWITCHYARD_READY only once every configured endpoint listens (and the store and supervisors are fine); until
  // then say what is not ready and why, again whenever that changes. Endpoints keep retrying with their backoff.
  let last = '';
  const check = (): boolean => {
    if (stopping) return true;
    const r = readiness(rt);
    if (r.ready) {
      rt.log.info('ready: every configured endpoint listens');
      process.stdout.write(`SWITCHYARD_READY${restPart}\n`);
      return true;
    }
    const text = r.reasons.join('; ');
    if (text !== last) {
      last = text;
      rt.log.warn({ reasons: r.reasons }, 'not ready yet');
      process.stderr.write(`switchyard: not ready: ${text} (retrying)\n`);
    }
    return false;
  };
  if (!check()) {
    readyTimer = setInterval(() => {
      if (check()) clearInterval(readyTimer);
    }, 250);
  }
}

/** True when this file is the process entry (`node dist/bundle/main.js`, `node dist/src/main.js`, `tsx src/main.ts`), not imported by the CLI. */
function isEntry(): boolean {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

export function runMain(): void {
  main().catch((err) => {
    process.stderr.write(`switchyard: fatal: ${(err as Error)?.stack ?? err}\n`);
    process.exit(EXIT.FATAL);
  });
}

if (isEntry()) runMain();
