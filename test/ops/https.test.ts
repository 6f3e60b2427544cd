import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:net';
import { join } from 'node:path';
import { CONFIG_DIR, removeDir, spawnBroker, tempDir, type BrokerProcess } from '../helpers.js';

/** One HTTPS request trusting only the test's own self-signed certificate. */
function httpsCall(port: number, ca: Buffer, method: string, path: string, body?: unknown): Promise<{ status: number; json: any; cookie: string }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      { host: '127.0.0.1', port, method, path, ca, servername: 'localhost', headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {} },
      (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : undefined, cookie: String(res.headers['set-cookie'] ?? '') }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** What a plain-HTTP client gets from the HTTPS port: the first bytes of the answer (a TLS alert or nothing, never an HTTP response). */
function plainHttp(port: number): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1', () => s.write('GET /api/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n'));
    let got = '';
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('close', () => resolve(got));
    s.on('error', () => resolve(got));
    s.setTimeout(5000, () => s.destroy());
  });
}

describe('REST over HTTPS', () => {
  const dirs: string[] = [];
  const brokers: BrokerProcess[] = [];
  let certDir: string;
  before(() => {
    certDir = tempDir('switchyard-cert-');
    dirs.push(certDir);
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'), '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
    // a second key that does not belong to the certificate
    execFileSync('openssl', ['genrsa', '-out', join(certDir, 'other-key.pem'), '2048'], { stdio: 'ignore' });
  });
  after(async () => {
    for (const b of brokers) await b.stop('SIGKILL');
    dirs.forEach(removeDir);
  });

  /** The shipped configuration plus a RestApi.yaml with sslConfig. */
  function configWith(ssl: Record<string, string>): string {
    const dir = tempDir('switchyard-config-');
    dirs.push(dir);
    mkdirSync(dir, { recursive: true });
    for (const f of readdirSync(CONFIG_DIR)) if (f !== 'RestApi.yaml') copyFileSync(join(CONFIG_DIR, f), join(dir, f));
    const rest = readFileSync(join(CONFIG_DIR, 'RestApi.yaml'), 'utf8');
    writeFileSync(join(dir, 'RestApi.yaml'), `${rest.trimEnd()}\n  sslConfig:\n${Object.entries(ssl).map(([k, v]) => `    ${k}: ${v}\n`).join('')}`);
    return dir;
  }

  test('https - RestApi.sslConfig with a self-signed PEM key and certificate: POST /api/v1/login over HTTPS sets the session cookie, plain HTTP gets no answer', async () => {
    const data = tempDir();
    dirs.push(data);
    const configDir = configWith({ keyFile: join(certDir, 'key.pem'), certFile: join(certDir, 'cert.pem') });
    const b = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: configDir });
    brokers.push(b);
    assert.match(b.stdout(), /REST API listening on https:\/\/127\.0\.0\.1:\d+\//);
    const ca = readFileSync(join(certDir, 'cert.pem'));
    const password = readFileSync(join(data, 'admin_password'), 'utf8').trim();

    const bad = await httpsCall(b.port, ca, 'POST', '/api/v1/login', { username: 'admin', password: 'not-the-password' });
    assert.equal(bad.status, 401);
    const login = await httpsCall(b.port, ca, 'POST', '/api/v1/login', { username: 'admin', password });
    assert.equal(login.status, 200, JSON.stringify(login.json));
    assert.equal(login.json.username, 'admin');
    assert.match(login.cookie, /maps_access_token=/);
    // a client that does not know the certificate refuses it (it is not a public CA's)
    await assert.rejects(fetch(`https://127.0.0.1:${b.port}/api/v1/ping`), (err: Error) => /self[- ]signed|certificate/i.test(String((err.cause as Error)?.message ?? err.message)));
    // plain HTTP on the HTTPS port: no HTTP answer (so no password goes in clear by mistake and works)
    assert.doesNotMatch(await plainHttp(b.port), /^HTTP\/1\.1 200/);
  });

  test('https - an unreadable key file or a key that is not the certificate\'s stops start-up with exit 2 naming RestApi.sslConfig', async () => {
    const cases = [
      { ssl: { keyFile: join(certDir, 'missing.pem'), certFile: join(certDir, 'cert.pem') }, expect: /configuration error: section 'RestApi', key 'sslConfig\.keyFile': cannot read .*missing\.pem: ENOENT/ },
      { ssl: { keyFile: join(certDir, 'other-key.pem'), certFile: join(certDir, 'cert.pem') }, expect: /configuration error: section 'RestApi', key 'sslConfig': the key and certificate cannot be used/ },
      { ssl: { keyFile: join(certDir, 'key.pem') }, expect: /configuration error: .*section 'RestApi', key 'sslConfig\.certFile'/ },
    ];
    for (const c of cases) {
      const data = tempDir();
      dirs.push(data);
      const b = await spawnBroker({ SWITCHYARD_DATA_DIR: data, SWITCHYARD_CONFIG_DIR: configWith(c.ssl as Record<string, string>) }, { waitReady: false });
      brokers.push(b);
      assert.equal(await b.exited, 2, b.stderr());
      assert.match(b.stderr(), c.expect);
    }
  });
});
