import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import type { MqttClient } from 'mqtt';
import { removeDir, startServer, tempDir, type TestServer } from '../helpers.js';
import { collect, connectClient, freePort, publishMany, startMosquitto, until, type Mosquitto } from './helpers.js';

const dir = tempDir('switchyard-mosq-tls-');
let mosq: Mosquitto | undefined;
let s: TestServer | undefined;
const clients: MqttClient[] = [];
after(async () => {
  for (const c of clients) c.end(true);
  await s?.close();
  await mosq?.stop('SIGKILL');
  removeDir(dir);
});

test('links - an mqtts:// bridge verifies the remote certificate (caFile) and carries QoS 1; an unverifiable one stays Delayed saying why', async () => {
  chmodSync(dir, 0o755);
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
    { stdio: 'ignore' },
  );
  chmodSync(key, 0o644); // mosquitto reads it after dropping to its own user
  const tlsPort = await freePort();
  const plainPort = await freePort();
  mosq = await startMosquitto(join(dir, 'mosq'), plainPort, [`listener ${tlsPort} 127.0.0.1`, `certfile ${cert}`, `keyfile ${key}`]);
  const link = (name: string, caFile?: string) => ({
    name,
    url: `mqtts://127.0.0.1:${tlsPort}`,
    backoff: { initial: 100, max: 1000, jitter: 0 },
    protocolConfigs: [{ type: 'mqtt', ...(caFile ? { caFile } : {}) }],
    linkConfigs: [{ direction: 'push', localNamespace: `${name}/#`, remoteNamespace: `tls/${name}/`, qualityOfService: 1 }],
  });
  s = await startServer({
    overrides: {
      AuthManager: { authenticationEnabled: false, authorisationEnabled: false },
      NetworkConnectionManager: { data: [link('trusted', cert), link('untrusted')] },
    },
  });
  const svc = s.rt.service('integrations')!;
  await until(() => svc.connectionState(svc.find('trusted')) === 'Established', 10000, 'TLS link established');
  const remote: Array<{ topic: string; payload: string }> = [];
  const rsub = await connectClient(plainPort, { clientId: 'tls-remote-sub' });
  clients.push(rsub);
  await collect(rsub, 'tls/#', remote);
  const pub = await connectClient(s.rt.service('endpoints')!.entries.get('MQTT Interface')!.handle!.port, { clientId: 'tls-pub' });
  clients.push(pub);
  await publishMany(pub, () => 'trusted/x', 50, 1, 't');
  await publishMany(pub, () => 'untrusted/x', 5, 1, 'u');
  await until(() => remote.length >= 50, 10000, 'messages over TLS');
  assert.deepEqual(remote.map((m) => m.payload), Array.from({ length: 50 }, (_, i) => `t-${i}`));
  const st = (await s.inject({ url: '/api/v1/server/integration/untrusted/status' })).json() as { state: string; lastError: string; outbox: number };
  assert.ok(['Delayed', 'Connecting'].includes(st.state), st.state);
  assert.match(st.lastError, /certificate/i);
  assert.equal(st.outbox, 5, 'nothing leaves for a peer that cannot be verified');
});
