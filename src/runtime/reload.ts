/**
 * Configuration reload (SIGHUP, `switchyard reload`): the YAML files and the environment are read again exactly
 * as at start (a ConfigError leaves everything as it was), compared with what runs, and the keys that can change
 * live are applied; every other changed key is named as needing a restart of the process and is NOT applied, so
 * `rt.config` (and the config API) always shows what actually runs. docs/operations.md "Reloading the configuration".
 */
import { writeFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { loadConfig, type LoadOptions } from '../config/load.js';
import { sectionNames, type Config, type EndPointServerConfig } from '../config/schema.js';
import type { Runtime } from './runtime.js';

export interface ConfigChange {
  /** `Section.key` (`NetworkManager.data[<endpoint name>]` for one endpoint). */
  key: string;
  /** Old and new values for scalars; omitted for objects and lists. */
  from?: unknown;
  to?: unknown;
}

export interface ReloadResult {
  at: string;
  pid: number;
  ok: boolean;
  /** Why nothing was applied (the new configuration is not valid). */
  error?: string;
  applied: ConfigChange[];
  restartNeeded: ConfigChange[];
}

/** AuthManager keys of the per-user lock and the per-address limits that Lockouts.setLimits applies. */
const LOGIN_LIMITS = [
  'maxFailuresBeforeLock',
  'initialLockSeconds',
  'maxLockSeconds',
  'failureDecaySeconds',
  'addressFailureLimit',
  'addressFailureWindow',
  'addressBlockSeconds',
  'unknownNamesPerAddress',
  'addressAttemptLimit',
  'addressAttemptWindow',
].map((k) => `AuthManager.${k}`);

/** Keys applied in place: read where they are used (not copied at start), or applied below. */
const LIVE = new Set([
  'MessageDaemon.logLevel', // Logs.setLevel: the root logger, its children and the audit lines in messaging.log
  'MessageDaemon.logEntriesInMemory', // the in-memory ring of /api/v1/server/log
  'RestApi.maxEventsPerDestination', // read per REST session at each delivery
  'AuthManager.minimumPasswordLength', // the password policy is read at each password change
  'AuthManager.requireUpperCase',
  'AuthManager.requireLowerCase',
  'AuthManager.requireDigit',
  'AuthManager.requireSpecial',
  'AuthManager.requireCurrentPassword',
  // login limits (Lockouts.setLimits): read at each login from the reload on
  ...LOGIN_LIMITS,
]);

const scalar = (v: unknown) => v === null || typeof v !== 'object';
const change = (key: string, from: unknown, to: unknown): ConfigChange => (scalar(from) && scalar(to) ? { key, from, to } : { key });

/** The changed keys between two configurations: one level inside each section, endpoints one by one by name. */
export function diffConfig(running: Config, next: Config): ConfigChange[] {
  const out: ConfigChange[] = [];
  for (const section of sectionNames) {
    const a = running[section] as Record<string, unknown>;
    const b = next[section] as Record<string, unknown>;
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (isDeepStrictEqual(a[key], b[key])) continue;
      if ((section === 'NetworkManager' || section === 'NetworkConnectionManager') && key === 'data') {
        const byName = (list: Array<{ name: string }>) => new Map(list.map((e) => [e.name, e]));
        const old = byName(a.data as Array<{ name: string }>);
        const now = byName(b.data as Array<{ name: string }>);
        for (const name of new Set([...old.keys(), ...now.keys()])) {
          if (!isDeepStrictEqual(old.get(name), now.get(name))) out.push({ key: `${section}.data[${name}]`, ...(old.has(name) ? {} : { to: 'added' }), ...(now.has(name) ? {} : { to: 'removed' }) });
        }
        continue;
      }
      out.push(change(`${section}.${key}`, a[key], b[key]));
    }
  }
  return out;
}

/**
 * Reads the configuration again and applies what can change live. Endpoints: one whose configuration changed (same
 * name, still there) is restarted with it through its actor, as `PUT /api/v1/server/interface/{name}` does, unless
 * it was changed through the REST API (its stored configuration wins, at start as here); an added or removed
 * endpoint needs a restart. Never throws: a problem is in the result (and in the log).
 */
export async function reloadConfig(rt: Runtime, options: LoadOptions = {}): Promise<ReloadResult> {
  const result: ReloadResult = { at: new Date().toISOString(), pid: process.pid, ok: true, applied: [], restartNeeded: [] };
  let next: Config;
  try {
    next = loadConfig({ configDir: rt.configDir, ...options }).config;
  } catch (err) {
    result.ok = false;
    result.error = (err as Error).message;
    rt.log.error({ err: result.error }, 'configuration reload refused: the configuration is not valid; nothing changed');
    return finish(rt, result);
  }
  const running = rt.config as unknown as Record<string, Record<string, unknown>>;
  for (const c of diffConfig(rt.config, next)) {
    const [section, key] = c.key.split('.') as [keyof Config, string];
    if (LIVE.has(c.key)) {
      running[section]![key] = (next[section] as Record<string, unknown>)[key];
      if (c.key === 'MessageDaemon.logLevel') rt.logs.setLevel(next.MessageDaemon.logLevel);
      if (c.key === 'MessageDaemon.logEntriesInMemory') rt.logs.monitor.setCapacity(next.MessageDaemon.logEntriesInMemory);
      if (LOGIN_LIMITS.includes(c.key)) rt.service('security')?.manager?.lockouts.setLimits(rt.config.AuthManager);
      result.applied.push(c);
      continue;
    }
    const m = /^NetworkManager\.data\[(.*)\]$/.exec(c.key);
    if (m && c.to === undefined && (await reloadEndpoint(rt, m[1]!, next))) {
      result.applied.push(c);
      continue;
    }
    const l = /^NetworkConnectionManager\.data\[(.*)\]$/.exec(c.key);
    if (l && c.to !== 'removed' && (await reloadLink(rt, l[1]!, next))) {
      result.applied.push(c);
      continue;
    }
    result.restartNeeded.push(c);
  }
  const show = (l: ConfigChange[]) => l.map((c) => ('from' in c ? `${c.key} (${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)})` : c.key));
  rt.log.info({ applied: show(result.applied), restartNeeded: show(result.restartNeeded) }, result.applied.length || result.restartNeeded.length ? 'configuration reloaded' : 'configuration reloaded: nothing changed');
  if (result.restartNeeded.length) rt.log.warn({ keys: result.restartNeeded.map((c) => c.key) }, `configuration reload: ${result.restartNeeded.length} changed key(s) take effect only after a restart of the process: ${result.restartNeeded.map((c) => c.key).join(', ')}`);
  return finish(rt, result);
}

async function reloadEndpoint(rt: Runtime, name: string, next: Config): Promise<boolean> {
  const svc = rt.service('endpoints'); // typed by the endpoints service (RuntimeServices); the kernel imports no domain
  if (!svc?.broker) return false; // not running: the change waits for a restart
  const entry = svc.entries.get(name);
  const running = rt.config.NetworkManager.data;
  const i = running.findIndex((e) => e.name === name);
  const cfg = next.NetworkManager.data.find((e) => e.name === name);
  // changed through REST (stored configuration): that one runs and keeps running, as at start
  if (!entry || i < 0 || !cfg || !isDeepStrictEqual(entry.config, running[i])) return false;
  try {
    await svc.update(entry, cfg);
    await rt.store.del('config', `NetworkManager/endpoint/${name}`); // update() stores it as a REST change would; this one came from the file
  } catch (err) {
    rt.log.warn({ endpoint: name, err: (err as Error).message }, 'configuration reload: the endpoint could not take its new configuration');
    return false;
  }
  running[i] = cfg;
  return true;
}

/** A link added or changed in the file (IntegrationsService.reconfigure); false when it needs a restart. */
async function reloadLink(rt: Runtime, name: string, next: Config): Promise<boolean> {
  const svc = rt.service('integrations');
  const cfg = next.NetworkConnectionManager.data.find((l) => l.name === name);
  if (!svc?.manager || !cfg) return false;
  try {
    if (!(await svc.reconfigure(name, cfg))) return false;
  } catch (err) {
    rt.log.warn({ integration: name, err: (err as Error).message }, 'configuration reload: the link could not take its new configuration');
    return false;
  }
  const running = rt.config.NetworkConnectionManager.data;
  const i = running.findIndex((l) => l.name === name);
  if (i < 0) running.push(cfg);
  else running[i] = cfg;
  return true;
}

/** `{dataDirectory}/reload.json`: the last reload's result, for `switchyard reload` (written whole, then renamed). */
function finish(rt: Runtime, result: ReloadResult): ReloadResult {
  try {
    const file = join(rt.config.MessageDaemon.dataDirectory, 'reload.json');
    writeFileSync(`${file}.tmp`, JSON.stringify(result, null, 2) + '\n');
    renameSync(`${file}.tmp`, file);
  } catch (err) {
    rt.log.warn({ err: (err as Error).message }, 'configuration reload: cannot write reload.json');
  }
  return result;
}
