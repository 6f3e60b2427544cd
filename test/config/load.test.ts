import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, maskSecrets } from '../../src/config/load.js';
import { ConfigError } from '../../src/errors.js';
import { CONFIG_DIR, removeDir, tempDir } from '../helpers.js';

const dirs: string[] = [];
function configDir(files: Record<string, string>): string {
  const d = tempDir('switchyard-config-');
  dirs.push(d);
  mkdirSync(d, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(d, name), text);
  return d;
}
after(() => dirs.forEach(removeDir));

describe('configuration', () => {
  test('config - the shipped config loads with MAPS defaults', () => {
    const { config } = loadConfig({ configDir: CONFIG_DIR, env: {} });
    assert.equal(config.RestApi.port, 8080);
    assert.equal(config.RestApi.cacheLifetime, 30000);
    assert.equal(config.MessageDaemon.dataDirectory, './data');
    assert.equal(config.AuthManager.maxFailuresBeforeLock, 5);
  });

  test('config - environment overrides the files', () => {
    const { config } = loadConfig({
      configDir: CONFIG_DIR,
      env: { SWITCHYARD_REST_PORT: '9090', SWITCHYARD_DATA_DIR: '/tmp/elsewhere', SWITCHYARD_ALLOW_ANONYMOUS: 'true' },
    });
    assert.equal(config.RestApi.port, 9090);
    assert.equal(config.MessageDaemon.dataDirectory, '/tmp/elsewhere');
    assert.equal(config.AuthManager.allowAnonymous, true);
  });

  test('config - SWITCHYARD_CONFIG_DIR chooses the folder', () => {
    const d = configDir({ 'rest.yaml': 'RestApi:\n  port: 7000\n' });
    assert.equal(loadConfig({ env: { SWITCHYARD_CONFIG_DIR: d } }).config.RestApi.port, 7000);
  });

  test('config - a wrong type names the file, the key and what was expected', () => {
    const d = configDir({ 'RestApi.yaml': 'RestApi:\n  port: "eighty"\n' });
    assert.throws(
      () => loadConfig({ configDir: d, env: {} }),
      (err: Error) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /RestApi\.yaml: section 'RestApi', key 'port': Invalid input: expected number, received string; got "eighty"/);
        return true;
      },
    );
  });

  test('config - an unknown section name stops loading', () => {
    const d = configDir({ 'x.yaml': 'RestAPI:\n  port: 80\n' });
    assert.throws(() => loadConfig({ configDir: d, env: {} }), /x\.yaml: unknown section 'RestAPI'; expected one of MessageDaemon, RestApi/);
  });

  test('config - a port out of range stops loading', () => {
    const d = configDir({ 'RestApi.yaml': 'RestApi:\n  port: 70000\n' });
    assert.throws(() => loadConfig({ configDir: d, env: {} }), /key 'port': .*a port between 0 and 65535.*got 70000/);
    assert.throws(() => loadConfig({ configDir: CONFIG_DIR, env: { SWITCHYARD_REST_PORT: '70000' } }), /SWITCHYARD_REST_PORT: expected a port between 0 and 65535; got "70000"/);
  });

  test('config - address lists (trustedProxies, lockoutExemptAddresses) refuse what is no address or has a prefix its family cannot have', () => {
    const bad = (file: string, body: string) => assert.throws(() => loadConfig({ configDir: configDir({ [file]: body }), env: {} }), (err: Error) => err instanceof ConfigError && /an IP address or CIDR range/.test(err.message));
    bad('AuthManager.yaml', 'AuthManager:\n  lockoutExemptAddresses: ["10.0.0.0/40"]\n');
    bad('AuthManager.yaml', 'AuthManager:\n  lockoutExemptAddresses: ["::1/129"]\n');
    bad('AuthManager.yaml', 'AuthManager:\n  lockoutExemptAddresses: ["1.2.3"]\n');
    bad('RestApi.yaml', 'RestApi:\n  trustedProxies: ["proxy.local"]\n');
    const ok = loadConfig({ configDir: configDir({ 'AuthManager.yaml': 'AuthManager:\n  lockoutExemptAddresses: ["10.0.0.0/8", "fd00::/8", "::ffff:10.1.2.3"]\n' }), env: {} });
    assert.deepEqual(ok.config.AuthManager.lockoutExemptAddresses, ['10.0.0.0/8', 'fd00::/8', '::ffff:10.1.2.3']);
  });

  test('config - an unknown key inside a section is refused (typos do not pass silently)', () => {
    const d = configDir({ 'RestApi.yaml': 'RestApi:\n  prot: 80\n' });
    assert.throws(() => loadConfig({ configDir: d, env: {} }), /unknown key 'prot'/);
  });

  test('config - invalid YAML and a missing folder are reported with the path', () => {
    const d = configDir({ 'bad.yaml': 'RestApi: [\n' });
    assert.throws(() => loadConfig({ configDir: d, env: {} }), /bad\.yaml: not valid YAML/);
    assert.throws(() => loadConfig({ configDir: join(d, 'nope'), env: {} }), /nope: the configuration directory does not exist/);
  });

  test('config - secrets are masked for display', () => {
    assert.deepEqual(maskSecrets({ user: 'a', password: 'p', nested: { tokenSecret: 'x', list: [{ passphrase: 'y' }] } }), {
      user: 'a',
      password: '********',
      nested: { tokenSecret: '********', list: [{ passphrase: '********' }] },
    });
    // a LoRa radio's hexKey (LoRaDeviceManager) is a secret too
    assert.deepEqual(maskSecrets({ data: [{ name: 'radio', hexKey: '00112233', frequency: 868.1 }] }), { data: [{ name: 'radio', hexKey: '********', frequency: 868.1 }] });
  });

  test('config - a bad value from SWITCHYARD_LOG_LEVEL or SWITCHYARD_MQTT_HOST names the environment variable, not the YAML file', () => {
    const d = configDir({ 'MessageDaemon.yaml': 'MessageDaemon:\n  logLevel: info\n' });
    // DEBUG (logback's spelling) is accepted from the environment
    assert.equal(loadConfig({ configDir: d, env: { SWITCHYARD_LOG_LEVEL: 'DEBUG' } }).config.MessageDaemon.logLevel, 'debug');
    assert.throws(
      () => loadConfig({ configDir: d, env: { SWITCHYARD_LOG_LEVEL: 'verbose' } }),
      (err: Error) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /^environment: section 'MessageDaemon', key 'logLevel' \(set by the environment variable SWITCHYARD_LOG_LEVEL\): .*got "verbose"/);
        assert.doesNotMatch(err.message, /MessageDaemon\.yaml/);
        return true;
      },
    );
    assert.throws(() => loadConfig({ configDir: d, env: { SWITCHYARD_MQTT_HOST: 'bad host' } }), /key 'data\.0\.url' \(set by the environment variable SWITCHYARD_MQTT_HOST\).*got "tcp:\/\/bad host:1883\/"/);
    // a bad value in the file is still the file's
    const f = configDir({ 'MessageDaemon.yaml': 'MessageDaemon:\n  logLevel: loud\n' });
    assert.throws(() => loadConfig({ configDir: f, env: {} }), /MessageDaemon\.yaml: section 'MessageDaemon', key 'logLevel': /);
  });

  test('config - a YAML syntax error keeps the parser\'s line, column and code excerpt', () => {
    const d = configDir({ 'RestApi.yaml': 'RestApi:\n  port: 8080\n   hostnames: x\n' });
    assert.throws(
      () => loadConfig({ configDir: d, env: {} }),
      (err: Error) => {
        assert.match(err.message, /RestApi\.yaml: not valid YAML: .*at line 2, column \d+:/);
        assert.match(err.message, /\n\s*port: 8080\n\s*\^/, 'the offending line and a caret under it');
        return true;
      },
    );
  });

  test('config - only string values are masked: sseTokenLifetime and other numbers or booleans under secret-like names are shown', () => {
    const { config } = loadConfig({ configDir: CONFIG_DIR, env: {} });
    const shown = maskSecrets(config) as typeof config;
    assert.equal(shown.RestApi.sseTokenLifetime, 60000);
    assert.equal(shown.AuthManager.requireCurrentPassword, true);
    assert.deepEqual(maskSecrets({ sslConfig: { keyFile: '/k.pem', passphrase: 'pw' } }), { sslConfig: { keyFile: '/k.pem', passphrase: '********' } });
  });
});
