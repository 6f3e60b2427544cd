import { readdirSync, readFileSync, existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ConfigError } from '../errors.js';
import { DEFAULT_MQTT_ENDPOINT, DEFAULT_MQTT_WS_ENDPOINT, NetworkManagerSchema, sectionNames, sectionSchemas, withPort, type Config, type SectionName } from './schema.js';

export interface LoadOptions {
  /** Folder of YAML files; default `SWITCHYARD_CONFIG_DIR` or `./config`. */
  configDir?: string;
  /** Environment to read overrides from; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Values applied after the files and the environment (tests). */
  overrides?: { [K in SectionName]?: Record<string, unknown> };
}

export interface LoadedConfig {
  config: Config;
  configDir: string;
  /** The file each section came from, for messages. */
  sources: Partial<Record<SectionName, string>>;
}

/** `section.key.path` (as zod reports it) → the environment variable that set it, for messages. */
type EnvOrigins = Map<string, string>;

function describeIssue(issue: z.core.$ZodIssue, raw: unknown, section: SectionName, origins: EnvOrigins): string {
  const path = issue.path.join('.');
  // a value that came from the environment: say so (the file the section came from did not set it)
  for (let n = issue.path.length; n > 0; n--) {
    const envName = origins.get(`${section}.${issue.path.slice(0, n).join('.')}`);
    if (envName) return `key '${path}' (set by the environment variable ${envName}): ${describeIssue(issue, raw, section, new Map()).replace(/^key '[^']*': /, '')}`;
  }
  let got: unknown = raw;
  for (const p of issue.path) got = got && typeof got === 'object' ? (got as Record<PropertyKey, unknown>)[p as PropertyKey] : undefined;
  if (issue.code === 'unrecognized_keys') {
    return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `'${path ? path + '.' : ''}${k}'`).join(', ')}`;
  }
  const shown = got === undefined ? 'nothing' : JSON.stringify(got);
  return `key '${path}': ${issue.message}; got ${shown}`;
}

const envRules: Array<{ name: string; section: SectionName; key: string; kind: 'port' | 'string' | 'boolean' | 'level' }> = [
  { name: 'SWITCHYARD_DATA_DIR', section: 'MessageDaemon', key: 'dataDirectory', kind: 'string' },
  { name: 'SWITCHYARD_REST_PORT', section: 'RestApi', key: 'port', kind: 'port' },
  { name: 'SWITCHYARD_REST_HOST', section: 'RestApi', key: 'hostnames', kind: 'string' },
  { name: 'SWITCHYARD_LOG_LEVEL', section: 'MessageDaemon', key: 'logLevel', kind: 'level' },
  { name: 'SWITCHYARD_ALLOW_ANONYMOUS', section: 'AuthManager', key: 'allowAnonymous', kind: 'boolean' },
];

/**
 * Reads every `*.yaml` / `*.yml` file of the config folder. Each file holds one or more sections as top-level keys
 * (`RestApi:`, `MessageDaemon:` ...). Then the environment overrides are applied, then each section is validated.
 * Any problem throws a ConfigError naming the file, the key and what was expected.
 */
export function loadConfig(options: LoadOptions = {}): LoadedConfig {
  const env = options.env ?? process.env;
  const configDir = resolve(options.configDir ?? env.SWITCHYARD_CONFIG_DIR ?? './config');
  const raw: Partial<Record<SectionName, Record<string, unknown>>> = {};
  const origins: EnvOrigins = new Map();
  const sources: Partial<Record<SectionName, string>> = {};

  if (existsSync(configDir)) {
    if (!statSync(configDir).isDirectory()) throw new ConfigError(`${configDir}: the configuration directory is not a directory`);
    const files = readdirSync(configDir).filter((f) => /\.ya?ml$/i.test(f)).sort();
    for (const file of files) {
      const path = join(configDir, file);
      let doc: unknown;
      try {
        doc = parseYaml(readFileSync(path, 'utf8'));
      } catch (err) {
        // the yaml parser's message carries the line, the column and an excerpt of the code with a caret: keep it
        throw new ConfigError(`${path}: not valid YAML: ${(err as Error).message.trimEnd()}`);
      }
      if (doc === null || doc === undefined) continue;
      if (typeof doc !== 'object' || Array.isArray(doc)) {
        throw new ConfigError(`${path}: expected a mapping of section names (${sectionNames.join(', ')}) at the top level`);
      }
      for (const [section, value] of Object.entries(doc as Record<string, unknown>)) {
        if (!(sectionNames as string[]).includes(section)) {
          throw new ConfigError(`${path}: unknown section '${section}'; expected one of ${sectionNames.join(', ')}`);
        }
        if (sources[section as SectionName]) {
          throw new ConfigError(`${path}: section '${section}' is also defined in ${sources[section as SectionName]}`);
        }
        if (value !== null && (typeof value !== 'object' || Array.isArray(value))) {
          throw new ConfigError(`${path}: section '${section}' must be a mapping of keys to values`);
        }
        raw[section as SectionName] = (value ?? {}) as Record<string, unknown>;
        sources[section as SectionName] = path;
      }
    }
  } else if (options.configDir !== undefined || env.SWITCHYARD_CONFIG_DIR !== undefined) {
    throw new ConfigError(`${configDir}: the configuration directory does not exist`);
  }

  for (const rule of envRules) {
    const value = env[rule.name];
    if (value === undefined || value === '') continue;
    let parsed: unknown = value;
    if (rule.kind === 'port') {
      if (!/^\d+$/.test(value) || Number(value) > 65535) {
        throw new ConfigError(`environment ${rule.name}: expected a port between 0 and 65535; got ${JSON.stringify(value)}`);
      }
      parsed = Number(value);
    } else if (rule.kind === 'boolean') {
      if (!/^(true|false|1|0)$/i.test(value)) throw new ConfigError(`environment ${rule.name}: expected true or false; got ${JSON.stringify(value)}`);
      parsed = /^(true|1)$/i.test(value);
    } else if (rule.kind === 'level') parsed = value.toLowerCase(); // DEBUG as logback writes it, debug as pino does
    raw[rule.section] = { ...(raw[rule.section] ?? {}), [rule.key]: parsed };
    origins.set(`${rule.section}.${rule.key}`, rule.name);
    sources[rule.section] ??= `environment ${rule.name}`;
  }
  applyEndpointEnv(env, raw, sources, origins);
  for (const [section, values] of Object.entries(options.overrides ?? {})) {
    raw[section as SectionName] = { ...(raw[section as SectionName] ?? {}), ...values };
  }

  const config = {} as Record<SectionName, unknown>;
  for (const name of sectionNames) {
    const result = sectionSchemas[name].safeParse(raw[name] ?? {});
    if (!result.success) {
      const problems = result.error.issues.map((i) => describeIssue(i, raw[name], name, origins));
      // every problem from the environment: the file is not the place to look
      const where = problems.every((p) => p.includes('(set by the environment variable ')) ? 'environment' : (sources[name] ?? '(defaults)');
      throw new ConfigError(`${where}: section '${name}', ${problems.join('; ')}`);
    }
    config[name] = result.data;
  }
  return { config: config as Config, configDir, sources };
}

/**
 * Replaces values of keys that look like secrets, for display. A secret is a string: numbers and booleans under a
 * secret-looking name (`sseTokenLifetime`, `requireCurrentPassword`) are settings, shown as they are.
 */
export function maskSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskSecrets);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] = /pass(word|phrase)?|secret|token|privatekey|credential|hexkey|apikey/i.test(k) && typeof v === 'string' && v !== '' ? '********' : maskSecrets(v);
    }
    return out;
  }
  return value;
}

/**
 * SWITCHYARD_MQTT_PORT / SWITCHYARD_MQTT_WS_PORT / SWITCHYARD_MQTT_HOST: the endpoint list makes these a special
 * case. They rewrite the URL of the default endpoints, found by name ('MQTT Interface', 'MQTT WebSocket
 * Interface'), in the configured list (or the built-in default list when NetworkManager is not configured).
 */
function applyEndpointEnv(env: NodeJS.ProcessEnv, raw: Partial<Record<SectionName, Record<string, unknown>>>, sources: Partial<Record<SectionName, string>>, origins: EnvOrigins): void {
  const rules = [
    { name: 'SWITCHYARD_MQTT_PORT', endpoint: DEFAULT_MQTT_ENDPOINT },
    { name: 'SWITCHYARD_MQTT_WS_PORT', endpoint: DEFAULT_MQTT_WS_ENDPOINT },
  ];
  const host = env.SWITCHYARD_MQTT_HOST || undefined;
  const wanted = rules.filter((r) => env[r.name] !== undefined && env[r.name] !== '');
  if (!wanted.length && !host) return;
  const nm = { ...(raw.NetworkManager ?? {}) };
  let data = nm.data as Array<Record<string, unknown>> | undefined;
  if (data === undefined) data = NetworkManagerSchema.parse({}).data.map((e) => ({ name: e.name, url: e.url, protocolConfigs: e.protocolConfigs.map((p) => ({ type: p.type })) }));
  if (!Array.isArray(data)) return; // the schema reports it
  data = data.map((e) => ({ ...e }));
  for (const rule of rules) {
    const value = env[rule.name];
    const entry = data.find((e) => e && e.name === rule.endpoint);
    if (value !== undefined && value !== '' && (!/^\d+$/.test(value) || Number(value) > 65535)) {
      throw new ConfigError(`environment ${rule.name}: expected a port between 0 and 65535; got ${JSON.stringify(value)}`);
    }
    if (!entry || typeof entry.url !== 'string') continue;
    try {
      const port = value !== undefined && value !== '' ? Number(value) : undefined;
      const current = /:(\d+)(\/|$)/.exec(entry.url.replace(/^[a-z]+:\/\//i, ''));
      entry.url = withPort(entry.url, port ?? Number(current?.[1] ?? 0), host);
      origins.set(`NetworkManager.data.${data.indexOf(entry)}.url`, [port !== undefined ? rule.name : '', host ? 'SWITCHYARD_MQTT_HOST' : ''].filter(Boolean).join(' and '));
    } catch {
      /* a malformed url is reported by the schema */
    }
  }
  nm.data = data;
  raw.NetworkManager = nm;
  sources.NetworkManager ??= 'environment SWITCHYARD_MQTT_PORT';
}
