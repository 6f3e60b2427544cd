/**
 * The federation set-up docker/compose.yaml brings up, checked without Docker: the compose file mounts
 * docker/federation/NetworkConnectionManager.yaml into both brokers and starts NATS with JetStream; that file is a
 * valid configuration; and the walk-through of docs/federation.md ("NATS") works with the same link configuration
 * (only the NATS address differs): mosquitto_sub on broker B gets what mosquitto_pub sends to broker A.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { loadConfig } from '../../src/config/load.js';
import { CONFIG_DIR, ROOT, removeDir, startServer, tempDir, waitUntil, type TestServer } from '../helpers.js';
import { mqttPort } from '../mqtt/helpers.js';
import { startNats, type NatsServer } from './nats-server.js';

const LINK_FILE = join(ROOT, 'docker/federation/NetworkConnectionManager.yaml');

describe('federation - the docker compose set-up', () => {
  it('federation - compose mounts the link configuration into both brokers and runs NATS with JetStream and a store', () => {
    const compose = parseYaml(readFileSync(join(ROOT, 'docker/compose.yaml'), 'utf8')) as {
      services: Record<string, { volumes?: string[]; command?: string[] }>;
    };
    for (const b of ['broker-a', 'broker-b']) {
      assert.ok(
        compose.services[b]!.volumes!.includes('./federation/NetworkConnectionManager.yaml:/app/config/NetworkConnectionManager.yaml:ro'),
        `${b} mounts the link configuration`,
      );
    }
    const cmd = compose.services.nats!.command!;
    assert.ok(cmd.includes('-js') && cmd.includes('-sd'), cmd.join(' '));
  });

  it('federation - the link configuration is valid with the shipped sections', () => {
    const dir = tempDir();
    try {
      for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml')) copyFileSync(join(CONFIG_DIR, f), join(dir, f));
      copyFileSync(LINK_FILE, join(dir, 'NetworkConnectionManager.yaml'));
      const { config } = loadConfig({ configDir: dir, env: {} });
      const link = config.NetworkConnectionManager.data[0]!;
      assert.equal(link.url, 'nats://nats:4222');
      assert.deepEqual(
        link.linkConfigs.map((l) => [l.direction, l.localNamespace, l.remoteNamespace, l.qualityOfService]),
        [
          ['push', 'federation/#', 'federation/', 1],
          ['pull', 'federation/', 'federation/#', 1],
        ],
      );
    } finally {
      removeDir(dir);
    }
  });

  describe('federation - the walk-through with mosquitto_pub and mosquitto_sub', () => {
    let nats: NatsServer;
    let a: TestServer;
    let b: TestServer;
    before(async () => {
      nats = await startNats();
      const section = (parseYaml(readFileSync(LINK_FILE, 'utf8')) as { NetworkConnectionManager: { data: Array<{ url: string }> } }).NetworkConnectionManager;
      section.data[0]!.url = nats.url;
      a = await startServer({ overrides: { NetworkConnectionManager: section } });
      b = await startServer({ overrides: { NetworkConnectionManager: section } });
      for (const s of [a, b]) {
        await waitUntil(async () => (await s.inject('/api/v1/server/integration/nats/status')).json().state === 'Established', 20000, 'link established');
      }
    });
    after(async () => {
      await a?.close();
      await b?.close();
      await nats?.dispose();
    });

    it('federation - mosquitto_sub on broker B receives what mosquitto_pub publishes on broker A', async () => {
      const portA = await mqttPort(a);
      const portB = await mqttPort(b);
      const sub = spawn('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(portB), '-u', 'admin', '-P', b.adminPassword, '-t', 'federation/#', '-q', '1', '-v', '-C', '1', '-W', '20'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      sub.stdout.on('data', (d) => (out += d));
      const exited = new Promise<number | null>((r) => sub.once('exit', (code) => r(code)));
      try {
        // publish until the subscriber is in place and the message crossed
        await waitUntil(
          async () => {
            await new Promise<void>((resolve) => {
              const p = spawn('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(portA), '-u', 'admin', '-P', a.adminPassword, '-t', 'federation/hello', '-m', 'hi from A', '-q', '1']);
              p.once('exit', () => resolve());
            });
            return out.length > 0;
          },
          20000,
          'mosquitto_sub output',
        );
        assert.equal(await exited, 0);
        assert.equal(out.trim(), 'federation/hello hi from A');
      } finally {
        if (sub.exitCode === null) sub.kill('SIGKILL');
      }
    });
  });
});
