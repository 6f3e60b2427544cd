/**
 * The `switchyard` command (bin/switchyard.js): `start`, `user add|passwd|delete|list|unlock`, `acl check`,
 * `config check`, `status`, `reload`. docs/operations.md describes every command and the exit codes (output.ts).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { stringify as toYaml } from 'yaml';
import '../sections.js'; // the domains' configuration sections (src/sections.ts), before any configuration is loaded
import { loadConfig, maskSecrets } from '../config/load.js';
import { sectionNames } from '../config/schema.js';
import { ConfigError, ValidationError } from '../errors.js';
import { StoreLockedError } from '../store/store.js';
import { randomPassword } from '../security/passwords.js';
import { aclCheck, addUser, deleteUser, listUsers, openOffline, setPassword, unlockUser, type Offline } from './offline.js';
import { call, groupId, ok, userId, type Remote } from './online.js';
import { CliError, EXIT_CLI, table } from './output.js';

const COMMON = `Common options:
  --config-dir <dir>   configuration folder (default SWITCHYARD_CONFIG_DIR or ./config)
  --data-dir <dir>     data directory (default SWITCHYARD_DATA_DIR or MessageDaemon.dataDirectory)
  --url <url>          work online through a running broker's REST API (default SWITCHYARD_URL), e.g.
                       http://127.0.0.1:8080; credentials: --auth user:password or SWITCHYARD_AUTH
  --json               machine-readable output
  -h, --help           this help`;

const PASSWORD_OPTS = `Password (one of; none given: read from the terminal, or the first line of stdin):
  --password <pw>      on the command line (visible in the process list: prefer the others)
  --password-file <f>  the first line of a file
  --password-stdin     the first line of stdin
  --generate           a random password that satisfies the policy, printed once`;

const HELP: Record<string, string> = {
  main: `switchyard - the Switchyard message broker and its administration

Usage: switchyard <command> [options]

Commands:
  start                               run the broker in this process (what npm start runs)
  user add <name> [--group <g>...]    create a user (default group: everyone)
  user passwd <name>                  set a user's password (recovers a lost admin password offline)
  user delete <name>                  delete a user
  user list                           list users, their groups and lock state
  user unlock <name>                  end a lockout after failed logins
  acl check <user> <permission> <resourceType> [<resourceKey>]
                                      what the ACLs decide, and why
  config check                        validate the configuration folder and print the effective sections
  status                              a running broker's readiness and summary
  reload                              make the running broker re-read its configuration (SIGHUP)

User and acl commands work offline on the data directory (the broker must be stopped: exit 3 otherwise) or online
with --url. Run 'switchyard <command> --help' for details. Exit codes: docs/operations.md.

${COMMON}`,
  start: `Usage: switchyard start

Runs the broker in this process (signals reach it directly; exit codes as documented: 0 clean shutdown, 1 fatal,
2 configuration error, 3 data directory in use, 4 REST port not bound, 5 shutdown timeout). Configured by
config/*.yaml and the SWITCHYARD_* environment variables.`,
  'user add': `Usage: switchyard user add <name> [--group <group>]... [password option]

Creates a user; the password must satisfy the AuthManager password policy. Without --group the user joins
'everyone' (connect, publish and subscribe by default).

${PASSWORD_OPTS}

${COMMON}`,
  'user passwd': `Usage: switchyard user passwd <name> [password option]

Sets the password of a user as an administrator would: its login sessions end and its lockout is reset. For admin,
the first-boot file {data}/admin_password is deleted. Lost the admin password? Stop the broker, then
'switchyard user passwd admin --generate' (offline), start it again.

${PASSWORD_OPTS}

${COMMON}`,
  'user delete': `Usage: switchyard user delete <name>

Deletes a user with its ACL entries; online, its connections and sessions end too.

${COMMON}`,
  'user list': `Usage: switchyard user list

Lists users with their groups and whether they are locked out.

${COMMON}`,
  'user unlock': `Usage: switchyard user unlock <name>

Ends a lockout (failed logins) and forgets the failures.

${COMMON}`,
  'acl check': `Usage: switchyard acl check <user> <permission> <resourceType> [<resourceKey>]

Prints ALLOW or DENY and the reason (the deciding ACL entry). resourceType: Server, Topic, Queue, Schema, ...;
resourceKey defaults to this server's name for Server. Exit code 0 for ALLOW, 7 for DENY.

${COMMON}`,
  'config check': `Usage: switchyard config check [--config-dir <dir>] [--section <name>]...

Validates every YAML file of the configuration folder with the environment overrides applied, exactly as start
does, and prints the effective sections (secrets masked). Exit code 0 when valid, 2 with one line naming the file,
the key and what was expected otherwise.`,
  user: `Usage: switchyard user <add|passwd|delete|list|unlock> ... [options]

  user add <name> [--group <g>]...    create a user (default group: everyone)
  user passwd <name>                  set a user's password (recovers a lost admin password offline)
  user delete <name>                  delete a user
  user list                           list users, their groups and lock state
  user unlock <name>                  end a lockout after failed logins

Offline on the data directory (the broker must be stopped: exit 3 otherwise) or online with --url.
Run 'switchyard user <command> --help' for one command's options.

${COMMON}`,
  acl: `Usage: switchyard acl check <user> <permission> <resourceType> [<resourceKey>]

Run 'switchyard acl check --help' for details.`,
  config: `Usage: switchyard config check [--config-dir <dir>] [--section <name>]...

Run 'switchyard config check --help' for details.`,
  reload: `Usage: switchyard reload [--config-dir <dir>] [--data-dir <dir>] [--json]

Makes the broker running on this machine's data directory re-read its configuration: sends it SIGHUP (its pid is in
{data}/switchyard.pid) and prints what it did, from {data}/reload.json: the keys applied live (log level, in-memory
log size, the password policy, RestApi.maxEventsPerDestination, a changed endpoint, which is restarted with its new
configuration) and the changed keys that need a restart of the process. An invalid configuration changes nothing.
Without a shell on that machine: 'kill -HUP <pid>' or 'docker kill --signal HUP <container>' do the same.
Exit code 0 when applied (even if some keys need a restart), 2 when the new configuration is not valid, 4 when no
broker runs on the data directory.`,
  status: `Usage: switchyard status [--url <url>] [--auth user:password]

Without --url, the broker of this machine at the configured REST port (config folder and SWITCHYARD_REST_PORT).
Asks a running broker: readiness (/readyz, with reasons), health, and (with credentials) name, version, uptime,
connections and endpoints. Exit code 0 when ready, 7 when the broker answers but is not ready, 4 when it cannot be
reached.`,
};

const OPTIONS: ParseArgsConfig['options'] = {
  help: { type: 'boolean', short: 'h' },
  'config-dir': { type: 'string' },
  'data-dir': { type: 'string' },
  url: { type: 'string' },
  auth: { type: 'string' },
  json: { type: 'boolean' },
  password: { type: 'string' },
  'password-file': { type: 'string' },
  'password-stdin': { type: 'boolean' },
  generate: { type: 'boolean' },
  group: { type: 'string', multiple: true },
  section: { type: 'string', multiple: true },
};

type Values = Record<string, string | boolean | string[] | undefined>;

function out(text: string): void {
  process.stdout.write(text.endsWith('\n') ? text : text + '\n');
}

async function readLine(prompt: string, hidden: boolean): Promise<string> {
  if (!process.stdin.isTTY) {
    const text = readFileSync(0, 'utf8');
    return text.split(/\r?\n/)[0] ?? '';
  }
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  if (hidden) {
    const write = (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput.bind(rl);
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = (s: string) => write(s.startsWith(prompt) ? prompt : '');
  }
  const answer = await new Promise<string>((res) => rl.question(prompt, res));
  rl.close();
  if (hidden) process.stderr.write('\n');
  return answer;
}

/** The new password from the options; `generated` when --generate made it (it is printed once). */
async function newPassword(v: Values): Promise<{ password: string; generated: boolean }> {
  const given = ['password', 'password-file', 'password-stdin', 'generate'].filter((k) => v[k] !== undefined && v[k] !== false);
  if (given.length > 1) throw new CliError(`choose one of --${given.join(', --')}`, EXIT_CLI.USAGE);
  if (v.generate) return { password: randomPassword(20), generated: true };
  if (typeof v.password === 'string') return { password: v.password, generated: false };
  if (typeof v['password-file'] === 'string') {
    try {
      return { password: readFileSync(v['password-file'], 'utf8').split(/\r?\n/)[0] ?? '', generated: false };
    } catch (err) {
      throw new CliError(`cannot read ${v['password-file']}: ${(err as Error).message}`, EXIT_CLI.USAGE);
    }
  }
  if (v['password-stdin']) return { password: readFileSync(0, 'utf8').split(/\r?\n/)[0] ?? '', generated: false };
  const first = await readLine('New password: ', true);
  if (process.stdin.isTTY) {
    const again = await readLine('Repeat it: ', true);
    if (again !== first) throw new CliError('the two passwords differ', EXIT_CLI.USAGE);
  }
  return { password: first, generated: false };
}

function remoteOf(v: Values): Remote | undefined {
  const url = (v.url as string | undefined) ?? process.env.SWITCHYARD_URL;
  if (!url) return undefined;
  const auth = (v.auth as string | undefined) ?? process.env.SWITCHYARD_AUTH;
  if (auth === undefined) return { url };
  const i = auth.indexOf(':');
  return i < 0 ? { url, user: auth, password: '' } : { url, user: auth.slice(0, i), password: auth.slice(i + 1) };
}

function runtimeOptions(v: Values) {
  const env = { ...process.env };
  if (typeof v['data-dir'] === 'string') env.SWITCHYARD_DATA_DIR = v['data-dir'];
  return { env, ...(typeof v['config-dir'] === 'string' ? { configDir: v['config-dir'] } : {}) };
}

async function offline<T>(v: Values, fn: (o: Offline) => Promise<T> | T): Promise<T> {
  let o: Offline;
  try {
    o = await openOffline(runtimeOptions(v));
  } catch (err) {
    if (err instanceof StoreLockedError) {
      throw new CliError(`${err.message}.\nA broker is running on this data directory: stop it first, or work through it with --url http://<host>:<port> --auth <user>:<password>.`, EXIT_CLI.LOCKED);
    }
    if (err instanceof ConfigError) throw new CliError(`configuration error: ${err.message}`, EXIT_CLI.USAGE);
    throw err;
  }
  try {
    return await fn(o);
  } catch (err) {
    if (err instanceof ValidationError) throw new CliError(err.message, EXIT_CLI.REFUSED);
    if (err instanceof Error && 'statusCode' in err && typeof (err as { statusCode: unknown }).statusCode === 'number') {
      const s = (err as { statusCode: number }).statusCode;
      throw new CliError(err.message, s === 404 ? EXIT_CLI.NOT_FOUND : EXIT_CLI.REFUSED);
    }
    throw err;
  } finally {
    await o.close();
  }
}

function need(args: string[], n: number, usage: string): void {
  if (args.length < n) throw new CliError(`missing arguments\n\n${HELP[usage]}`, EXIT_CLI.USAGE);
  if (args.length > n + (usage === 'acl check' ? 1 : 0)) throw new CliError(`unexpected argument "${args[n + (usage === 'acl check' ? 1 : 0)]}"`, EXIT_CLI.USAGE);
}

async function userCommand(sub: string, args: string[], v: Values): Promise<number> {
  const r = remoteOf(v);
  const where = r ? `through ${r.url}` : 'offline';
  switch (sub) {
    case 'add': {
      need(args, 1, 'user add');
      const name = args[0]!;
      const groups = (v.group as string[] | undefined) ?? ['everyone'];
      const { password, generated } = await newPassword(v);
      if (r) {
        const gids = [];
        for (const g of groups) gids.push(await groupId(r, g));
        const created = ok(await call(r, 'POST', '/api/v1/auth/users', { username: name, password }), `adding user ${name}`).json as { uniqueId: string };
        for (const gid of gids) ok(await call(r, 'POST', `/api/v1/auth/groups/${gid}/${created.uniqueId}`), 'adding to group');
      } else await offline(v, (o) => addUser(o, name, password, groups));
      out(`user ${name} added (${where}), groups: ${groups.join(', ') || 'none'}`);
      if (generated) out(`password: ${password}`);
      return EXIT_CLI.OK;
    }
    case 'passwd': {
      need(args, 1, 'user passwd');
      const name = args[0]!;
      const { password, generated } = await newPassword(v);
      if (r) {
        const id = await userId(r, name);
        ok(await call(r, 'PUT', `/api/v1/auth/users/${id}/password`, { newPassword: password }), `setting the password of ${name}`);
        out(`password of ${name} changed (${where})`);
      } else {
        const { fileDeleted } = await offline(v, (o) => setPassword(o, name, password));
        out(`password of ${name} changed (${where})${fileDeleted ? '; the first-boot admin_password file was deleted' : ''}`);
      }
      if (generated) out(`password: ${password}`);
      return EXIT_CLI.OK;
    }
    case 'delete': {
      need(args, 1, 'user delete');
      const name = args[0]!;
      if (r) ok(await call(r, 'DELETE', `/api/v1/auth/users/${await userId(r, name)}`), `deleting ${name}`);
      else await offline(v, (o) => deleteUser(o, name));
      out(`user ${name} deleted (${where})`);
      return EXIT_CLI.OK;
    }
    case 'list': {
      need(args, 0, 'user list');
      let rows: Array<{ username: string; groups: string[]; locked: boolean; remainingLockSeconds: number }>;
      if (r) {
        const users = ok(await call(r, 'GET', '/api/v1/auth/users'), 'listing users').json as Array<{ username: string; groupList: Array<{ name: string }> }>;
        const locks = ok(await call(r, 'GET', '/api/v1/auth/user-lockouts'), 'listing lockouts').json as Array<{ username: string; locked: boolean; remainingLockSeconds: number }>;
        rows = users.map((u) => {
          const l = locks.find((x) => x.username === u.username);
          return { username: u.username, groups: u.groupList.map((g) => g.name), locked: l?.locked ?? false, remainingLockSeconds: l?.remainingLockSeconds ?? 0 };
        });
      } else rows = await offline(v, (o) => listUsers(o));
      if (v.json) out(JSON.stringify(rows, null, 2));
      else out(table([['USER', 'GROUPS', 'LOCKED'], ...rows.map((u) => [u.username, u.groups.join(',') || '-', u.locked ? `yes (${u.remainingLockSeconds} s)` : 'no'])]));
      return EXIT_CLI.OK;
    }
    case 'unlock': {
      need(args, 1, 'user unlock');
      const name = args[0]!;
      let was: boolean;
      if (r) {
        const locks = ok(await call(r, 'GET', '/api/v1/auth/user-lockouts'), 'listing lockouts').json as Array<{ username: string; locked: boolean }>;
        was = locks.some((l) => l.username === name && l.locked);
        ok(await call(r, 'DELETE', `/api/v1/auth/user-lockouts/${await userId(r, name)}`), `unlocking ${name}`);
      } else was = await offline(v, (o) => unlockUser(o, name));
      out(was ? `user ${name} unlocked (${where})` : `user ${name} was not locked; its failed logins are forgotten (${where})`);
      return EXIT_CLI.OK;
    }
    default:
      throw new CliError(`unknown user command "${sub ?? ''}"; expected add, passwd, delete, list or unlock`, EXIT_CLI.USAGE);
  }
}

async function aclCommand(sub: string, args: string[], v: Values): Promise<number> {
  if (sub !== 'check') throw new CliError(`unknown acl command "${sub ?? ''}"; expected check`, EXIT_CLI.USAGE);
  need(args, 3, 'acl check');
  const [user, permission, type, key] = args as [string, string, string, string | undefined];
  const r = remoteOf(v);
  let result: { decision: string; reason: string | null; sources?: string[] | null };
  if (r) {
    const name = r ? (await call(r, 'GET', '/api/v1/name')).json : undefined;
    const resourceKey = key ?? (type.toLowerCase() === 'server' ? String(name) : undefined);
    if (resourceKey === undefined) throw new CliError('a resourceKey is needed for this resource type', EXIT_CLI.USAGE);
    result = ok(await call(r, 'POST', '/api/v1/auth/acl/check', { identityId: user, permission, resourceType: type, resourceKey, explain: true }), 'ACL check').json;
  } else {
    result = await offline(v, (o) => {
      const resourceKey = key ?? (type.toLowerCase() === 'server' ? o.rt.serverName : undefined);
      if (resourceKey === undefined) throw new CliError('a resourceKey is needed for this resource type', EXIT_CLI.USAGE);
      return aclCheck(o, user, permission, type, resourceKey);
    });
  }
  if (v.json) out(JSON.stringify(result, null, 2));
  else out(`${result.reason?.startsWith(result.decision) ? result.reason : `${result.decision}: ${result.reason ?? ''}`}${result.sources?.length ? `\n  deciding entry: ${result.sources.join('; ')}` : ''}`);
  return result.decision === 'ALLOW' ? EXIT_CLI.OK : EXIT_CLI.NO;
}

function configCheck(v: Values): number {
  let loaded;
  try {
    loaded = loadConfig(runtimeOptions(v));
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`configuration error: ${err.message}`, EXIT_CLI.USAGE);
    throw err;
  }
  const wanted = (v.section as string[] | undefined) ?? sectionNames;
  const unknown = wanted.filter((s) => !(sectionNames as string[]).includes(s));
  if (unknown.length) throw new CliError(`unknown section ${unknown.join(', ')}; expected one of ${sectionNames.join(', ')}`, EXIT_CLI.USAGE);
  const shown: Record<string, unknown> = {};
  for (const s of wanted) shown[s] = maskSecrets(loaded.config[s as keyof typeof loaded.config]);
  if (v.json) out(JSON.stringify(shown, null, 2));
  else {
    out(`# configuration in ${loaded.configDir}: valid`);
    for (const s of wanted) out(`# ${s}: ${loaded.sources[s as keyof typeof loaded.sources] ?? 'defaults'}`);
    out(toYaml(shown));
  }
  return EXIT_CLI.OK;
}

/** Without --url: this machine's broker, at the REST port of the configuration (SWITCHYARD_REST_PORT applied). */
function localRemote(v: Values): Remote {
  let rest;
  try {
    rest = loadConfig(runtimeOptions(v)).config.RestApi;
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`configuration error: ${err.message}`, EXIT_CLI.USAGE);
    throw err;
  }
  if (!rest.enabled || rest.port === 0) throw new CliError('the configured REST port is not fixed (disabled or 0): give --url', EXIT_CLI.USAGE);
  const host = ['0.0.0.0', '::', ''].includes(rest.hostnames) ? '127.0.0.1' : rest.hostnames.includes(':') ? `[${rest.hostnames}]` : rest.hostnames;
  const auth = (v.auth as string | undefined) ?? process.env.SWITCHYARD_AUTH;
  const url = `${rest.sslConfig ? 'https' : 'http'}://${host}:${rest.port}`; // a self-signed certificate: NODE_EXTRA_CA_CERTS=<cert.pem>
  return remoteOf({ ...v, url, auth }) ?? { url };
}

async function status(v: Values): Promise<number> {
  const r = remoteOf(v) ?? localRemote(v);
  const ready = await call(r, 'GET', '/readyz', undefined, { auth: false });
  const health = await call(r, 'GET', '/health', undefined, { auth: false });
  const report: Record<string, unknown> = { url: r.url, ready: ready.status === 200, reasons: ready.json?.reasons ?? [], health: health.text };
  if (r.user !== undefined) {
    const info = await call(r, 'GET', '/api/v1/server/details/info');
    if (info.status === 200) Object.assign(report, { serverName: info.json.serverName, version: info.json.version, uptimeSeconds: Math.round(info.json.uptime / 1000), connections: info.json.connections, destinations: info.json.destinations });
    const ifs = await call(r, 'GET', '/api/v1/server/interfaces');
    if (ifs.status === 200) report.endpoints = (ifs.json as Array<{ name: string; state: string; port: number; host: string }>).map((e) => ({ name: e.name, state: e.state, address: e.host.startsWith('serial:') ? e.host : `${e.host}:${e.port}` }));
  }
  if (v.json) out(JSON.stringify(report, null, 2));
  else {
    out(`${r.url}: ${report.ready ? 'ready' : 'NOT READY'} (health ${report.health})`);
    for (const why of report.reasons as string[]) out(`  not ready: ${why}`);
    if (report.serverName) out(`server ${report.serverName} ${report.version}, up ${report.uptimeSeconds} s, ${report.connections} connections, ${report.destinations} destinations`);
    for (const e of (report.endpoints as Array<{ name: string; state: string; address: string }> | undefined) ?? []) out(`  endpoint ${e.name}: ${e.state} ${e.address}`);
  }
  return report.ready ? EXIT_CLI.OK : EXIT_CLI.NO;
}

/**
 * `npx switchyard start` (and `npm exec`, `npm run <script>` running it) puts npm and a shell between the caller and
 * the broker: npm passes SIGTERM to the shell, the shell dies without passing it on, and the broker went on as an
 * orphan holding its ports and the data-dir lock. Started by npm (npm_command is set), the broker watches its parent
 * and shuts down gracefully, as on SIGTERM, when the parent is gone. Not otherwise: `switchyard start &` from a
 * shell that then exits keeps running, as a started daemon should.
 */
function watchParentUnderNpm(): void {
  if (!process.env.npm_command) return;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    process.stderr.write(`switchyard: the process that started this broker (npm, pid ${parent}) is gone; shutting down\n`);
    process.kill(process.pid, 'SIGTERM');
  }, 500);
  timer.unref();
}

/** The data directory of this machine's broker: --data-dir, else the configuration's (SWITCHYARD_DATA_DIR applied). */
function dataDirOf(v: Values): string {
  try {
    return loadConfig(runtimeOptions(v)).config.MessageDaemon.dataDirectory;
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`configuration error: ${err.message}`, EXIT_CLI.USAGE);
    throw err;
  }
}

async function reload(v: Values): Promise<number> {
  // the new configuration is checked here first, with the same loader, so a typo is reported to the person typing
  let problem: string | undefined;
  try {
    loadConfig(runtimeOptions(v));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problem = err.message;
  }
  const dir = resolve(typeof v['data-dir'] === 'string' ? v['data-dir'] : problem ? (process.env.SWITCHYARD_DATA_DIR ?? './data') : dataDirOf(v));
  const pidFile = join(dir, 'switchyard.pid');
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').trim());
    if (!Number.isInteger(pid) || pid <= 0) throw new Error('not a pid');
    process.kill(pid, 0);
  } catch {
    throw new CliError(`no broker is running on ${dir} (no live process in ${pidFile})`, EXIT_CLI.UNREACHABLE);
  }
  const resultFile = join(dir, 'reload.json');
  const before = existsSync(resultFile) ? statSync(resultFile).mtimeMs : 0;
  const previous = existsSync(resultFile) ? readFileSync(resultFile, 'utf8') : '';
  process.kill(pid, 'SIGHUP');
  const end = Date.now() + 15000;
  let text = '';
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    if (!existsSync(resultFile)) continue;
    const t = readFileSync(resultFile, 'utf8');
    if (statSync(resultFile).mtimeMs !== before || t !== previous) {
      text = t;
      break;
    }
  }
  if (!text) throw new CliError(`sent SIGHUP to pid ${pid}; no answer in ${resultFile} within 15 s (see the broker's log)`, EXIT_CLI.FATAL);
  const result = JSON.parse(text) as import('../runtime/reload.js').ReloadResult;
  if (v.json) out(JSON.stringify(result, null, 2));
  else if (!result.ok) out(`reload refused by pid ${pid}, nothing changed: ${result.error}`);
  else {
    const show = (c: { key: string; from?: unknown; to?: unknown }) => ('from' in c ? `${c.key}: ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}` : c.to ? `${c.key} (${c.to})` : c.key);
    out(`configuration reloaded by pid ${pid}`);
    if (!result.applied.length && !result.restartNeeded.length) out('  nothing changed');
    for (const c of result.applied) out(`  applied: ${show(c)}`);
    for (const c of result.restartNeeded) out(`  needs a restart: ${show(c)}`);
  }
  return result.ok ? EXIT_CLI.OK : EXIT_CLI.USAGE;
}

export async function cli(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    throw new CliError(`${(err as Error).message}\nRun 'switchyard --help'.`, EXIT_CLI.USAGE);
  }
  const v = parsed.values as Values;
  const [cmd, sub, ...rest] = parsed.positionals;
  const helpKey = (cmd === 'user' || cmd === 'acl' || cmd === 'config') && sub !== undefined && HELP[`${cmd} ${sub}`] ? `${cmd} ${sub}` : (cmd ?? 'main');
  if (v.help || !cmd) {
    if (!HELP[helpKey]) throw new CliError(`unknown command "${cmd}"\nRun 'switchyard --help'.`, EXIT_CLI.USAGE);
    out(HELP[helpKey]);
    return cmd || v.help ? EXIT_CLI.OK : EXIT_CLI.USAGE;
  }
  switch (cmd) {
    case 'start': {
      if (sub !== undefined) throw new CliError(`unexpected argument "${sub}"`, EXIT_CLI.USAGE);
      if (typeof v['data-dir'] === 'string') process.env.SWITCHYARD_DATA_DIR = v['data-dir'];
      if (typeof v['config-dir'] === 'string') process.env.SWITCHYARD_CONFIG_DIR = v['config-dir'];
      // the production bundle next to dist/src when there is one (npm run build writes both), as npm start runs it
      const bundled = new URL('../../bundle/main.js', import.meta.url);
      const { runMain } = (existsSync(bundled) ? await import(bundled.href) : await import('../main.js')) as typeof import('../main.js');
      watchParentUnderNpm();
      runMain();
      return -1; // the broker owns the process and exits it
    }
    case 'user':
      return userCommand(sub!, rest, v);
    case 'acl':
      return aclCommand(sub!, rest, v);
    case 'config':
      if (sub !== 'check') throw new CliError(`unknown config command "${sub ?? ''}"; expected check`, EXIT_CLI.USAGE);
      return configCheck(v);
    case 'status':
      return status(v);
    case 'reload':
      if (sub !== undefined) throw new CliError(`unexpected argument "${sub}"`, EXIT_CLI.USAGE);
      return reload(v);
    default:
      throw new CliError(`unknown command "${cmd}"\nRun 'switchyard --help'.`, EXIT_CLI.USAGE);
  }
}

export function runCli(argv = process.argv.slice(2)): void {
  cli(argv).then(
    (code) => {
      if (code >= 0) process.exitCode = code;
    },
    (err) => {
      if (err instanceof CliError) {
        process.stderr.write(`switchyard: ${err.message}\n`);
        process.exitCode = err.code;
      } else {
        process.stderr.write(`switchyard: ${(err as Error)?.stack ?? err}\n`);
        process.exitCode = EXIT_CLI.FATAL;
      }
    },
  );
}
