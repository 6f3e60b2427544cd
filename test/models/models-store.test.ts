import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { removeDir, spawnBroker, startServer, tempDir, waitUntil, type BrokerProcess, type TestServer } from '../helpers.js';

const BOUNDARY = '----switchyard-test-boundary';
/** A multipart/form-data body with one file part. */
export function multipart(content: Buffer, field = 'file', filename = 'model.bin'): { payload: Buffer; headers: Record<string, string> } {
  const head = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${field}"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`);
  const tail = Buffer.from(`\r\n--${BOUNDARY}--\r\n`);
  return { payload: Buffer.concat([head, content, tail]), headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } };
}

describe('model store routes', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ overrides: { MessageDaemon: { modelStore: { maxModelSize: 4096 } } } });
  });
  after(async () => s.close());

  const upload = (name: string, content: Buffer, field = 'file') => s.inject({ method: 'POST', url: `/api/v1/server/models/${name}`, ...multipart(content, field) });

  test('models - upload, list, HEAD, download with Content-Disposition, overwrite, delete', async () => {
    assert.deepEqual((await s.inject('/api/v1/server/models')).json(), []);
    const r = await upload('anomaly.v1', Buffer.from('model bytes \u0000\u0001'));
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(r.json(), { status: 'Success' });
    assert.deepEqual((await s.inject('/api/v1/server/models')).json(), ['anomaly.v1']);
    const head = await s.inject({ method: 'HEAD', url: '/api/v1/server/models/anomaly.v1' });
    assert.equal(head.statusCode, 200);
    assert.equal(head.body, '');
    const missingHead = await s.inject({ method: 'HEAD', url: '/api/v1/server/models/nothing' });
    assert.equal(missingHead.statusCode, 404);
    assert.equal(missingHead.body, '');
    const dl = await s.inject('/api/v1/server/models/anomaly.v1');
    assert.equal(dl.statusCode, 200);
    assert.equal(dl.headers['content-disposition'], 'attachment; filename="anomaly.v1"');
    assert.equal(dl.headers['content-type'], 'application/octet-stream');
    assert.deepEqual(dl.rawPayload, Buffer.from('model bytes \u0000\u0001'));
    assert.equal((await upload('anomaly.v1', Buffer.from('second'))).statusCode, 200);
    assert.equal((await s.inject('/api/v1/server/models/anomaly.v1')).body, 'second', 'an upload overwrites');
    assert.deepEqual((await s.inject({ method: 'DELETE', url: '/api/v1/server/models/anomaly.v1' })).json(), { status: 'Success' });
    const gone = await s.inject({ method: 'DELETE', url: '/api/v1/server/models/anomaly.v1' });
    assert.equal(gone.statusCode, 404);
    assert.deepEqual(gone.json(), { status: 'Model not found' });
    assert.deepEqual((await s.inject('/api/v1/server/models/anomaly.v1')).json(), { status: 'Model not found' });
  });

  test('models - path traversal and bad names are refused with 400 before touching the disk', async () => {
    for (const url of [
      '/api/v1/server/models/..%2F..%2Fetc%2Fpasswd',
      '/api/v1/server/models/%2e%2e%2f',
      '/api/v1/server/models/a/b',
      '/api/v1/server/models/.hidden',
      '/api/v1/server/models/a%00b',
    ]) {
      for (const method of ['GET', 'DELETE', 'POST'] as const) {
        const r = await s.inject({ method, url, ...(method === 'POST' ? multipart(Buffer.from('x')) : {}) });
        assert.equal(r.statusCode, 400, `${method} ${url}: ${r.statusCode} ${r.body}`);
        assert.match(r.json().status, /^(Invalid model name|Model name must not be blank)/);
      }
      assert.equal((await s.inject({ method: 'HEAD', url })).statusCode, 400, `HEAD ${url}`);
    }
    assert.equal((await s.inject('/api/v1/server/models/%20')).json().status, 'Model name must not be blank');
    // a client that does not normalise the path (node's http sends it as is; light-my-request would normalise it)
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    const port = (s.app.server.address() as { port: number }).port;
    for (const path of ['/api/v1/server/models/../../etc/passwd', '/api/v1/server/models/..%2f..%2fetc%2fpasswd']) {
      const raw = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        http
          .get({ host: '127.0.0.1', port, path, headers: s.auth }, (res) => {
            let body = '';
            res.on('data', (d) => (body += d));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          })
          .on('error', reject);
      });
      assert.equal(raw.status, 400, `${path}: ${raw.body}`);
      assert.match(JSON.parse(raw.body).status, /^Invalid model name/);
    }
    assert.deepEqual(readdirSync(join(s.dataDir, 'models')), [], 'nothing was written');
  });

  test('models - an upload without a file part, not multipart, or over the size limit is refused and leaves nothing', async () => {
    const notMultipart = await s.inject({ method: 'POST', url: '/api/v1/server/models/m', payload: { file: 'x' } });
    assert.equal(notMultipart.statusCode, 400);
    assert.match(notMultipart.json().status, /^File must be provided/);
    const wrongField = await upload('m', Buffer.from('x'), 'other');
    assert.equal(wrongField.statusCode, 400);
    assert.match(wrongField.json().status, /no part named "file"/);
    assert.equal((await upload('m', Buffer.from('small'))).statusCode, 200);
    const big = await upload('m', Buffer.alloc(5000, 7));
    assert.equal(big.statusCode, 413, big.body);
    assert.equal((await s.inject('/api/v1/server/models/m')).body, 'small', 'the old model is kept');
    assert.deepEqual(readdirSync(join(s.dataDir, 'models')), ['m'], 'no temp file left');
  });

  test('models - with the model store switched off every route answers 406', async () => {
    const off = await startServer({ overrides: { MessageDaemon: { modelStore: { enabled: false } } } });
    try {
      assert.deepEqual((await off.inject('/api/v1/server/models')).json(), { status: 'Failure, ML not supported' });
      assert.equal((await off.inject('/api/v1/server/models/x')).statusCode, 406);
      assert.equal((await off.inject({ method: 'HEAD', url: '/api/v1/server/models/x' })).statusCode, 406);
      assert.equal((await off.inject({ method: 'DELETE', url: '/api/v1/server/models/x' })).statusCode, 406);
      assert.equal((await off.inject({ method: 'POST', url: '/api/v1/server/models/x', ...multipart(Buffer.from('x')) })).statusCode, 406);
    } finally {
      await off.close();
    }
  });
});

/** VmRSS of a process in bytes (Linux). */
function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** Deterministic bytes, chunk by chunk. */
function chunkOf(i: number, size: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  let x = (i * 2654435761) >>> 0;
  for (let j = 0; j < size; j += 4) {
    x = (x * 1103515245 + 12345) >>> 0;
    b.writeUInt32LE(x, j);
  }
  return b;
}

describe('model store in the broker process', () => {
  const dataDir = tempDir();
  let b: BrokerProcess;
  before(async () => {
    b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir });
  });
  after(async () => {
    await b?.stop('SIGKILL');
    removeDir(dataDir);
  });

  /**
   * Streams a multipart upload of `chunks` × 64 KiB without holding it in memory; `onChunk` can stop it (returns
   * false) to simulate an interrupted upload. Resolves with the response (or the socket error) and the sha256.
   */
  function streamUpload(port: number, name: string, chunks: number, onChunk?: (i: number) => Promise<boolean> | boolean): Promise<{ status: number; body: string; sha: string }> {
    return new Promise((resolve, reject) => {
      const head = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: application/octet-stream\r\n\r\n`);
      const tail = Buffer.from(`\r\n--${BOUNDARY}--\r\n`);
      const hash = createHash('sha256');
      const req = http.request({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: `/api/v1/server/models/${name}`,
        headers: { ...b.auth(), 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': head.length + chunks * 65536 + tail.length },
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, sha: hash.digest('hex') }));
      });
      req.on('error', reject);
      void (async () => {
        req.write(head);
        for (let i = 0; i < chunks; i++) {
          if (onChunk && !(await onChunk(i))) return; // left hanging: the caller kills the broker
          const c = chunkOf(i, 65536);
          hash.update(c);
          if (!req.write(c)) await new Promise((r) => req.once('drain', r));
        }
        req.end(tail);
      })().catch(reject);
    });
  }

  const download = (name: string) =>
    new Promise<{ sha: string; size: number; disposition: string }>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port: b.port, path: `/api/v1/server/models/${name}`, headers: b.auth() }, (res) => {
          const h = createHash('sha256');
          let size = 0;
          res.on('data', (d: Buffer) => {
            h.update(d);
            size += d.length;
          });
          res.on('end', () => resolve({ sha: h.digest('hex'), size, disposition: String(res.headers['content-disposition']) }));
          res.on('error', reject);
        })
        .on('error', reject);
    });

  test('models - a 50 MB model makes an upload/download round trip with constant broker memory (RSS growth printed)', async () => {
    const mib = (n: number) => (n / 2 ** 20).toFixed(1);
    // a first, small upload pays what the first upload of a broker pays once, whatever its size (the multipart
    // parser loaded, the model loader's worker started: about 25 MiB): measured before, not charged to the 50 MiB
    const before = rssOf(b.proc.pid!);
    const warm = await streamUpload(b.port, 'warm', 16);
    assert.equal(warm.status, 200, warm.body);
    const warmGrowth = rssOf(b.proc.pid!) - before;
    const rss0 = rssOf(b.proc.pid!);
    let peak = rss0;
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(b.proc.pid!))), 20);
    let peak50 = 0;
    try {
      const up = await streamUpload(b.port, 'big', 800); // 800 x 64 KiB = 50 MiB
      assert.equal(up.status, 200, up.body);
      const down = await download('big');
      assert.equal(down.size, 800 * 65536);
      assert.equal(down.sha, up.sha, 'the downloaded model is the uploaded one');
      assert.equal(down.disposition, 'attachment; filename="big"');
      peak50 = peak;
      // three times the size: if the broker buffered models, its memory would grow with them
      const up3 = await streamUpload(b.port, 'big3', 2400);
      assert.equal(up3.status, 200, up3.body);
      assert.equal((await download('big3')).sha, up3.sha);
    } finally {
      clearInterval(sampler);
    }
    process.stdout.write(
      `# model store: broker RSS before ${mib(before)} MiB, after a first 1 MiB upload ${mib(rss0)} MiB (+${mib(warmGrowth)}); 50 MiB round trip: peak ${mib(peak50)} MiB (growth ${mib(peak50 - rss0)} MiB); ` +
        `then a 150 MiB round trip: peak ${mib(peak)} MiB (further growth ${mib(peak - peak50)} MiB)\n`,
    );
    assert.ok(peak50 - rss0 < 64 * 2 ** 20, `RSS grew ${mib(peak50 - rss0)} MiB for a 50 MiB round trip`);
    assert.ok(peak - peak50 < 32 * 2 ** 20, `RSS grew a further ${mib(peak - peak50)} MiB for a 150 MiB round trip: models must be streamed, not buffered`);
  });

  test('models - SIGKILL of the broker during an upload leaves the old model intact and no temp file after restart', async () => {
    const old = Buffer.from('the old model, complete');
    const first = await fetch(`http://127.0.0.1:${b.port}/api/v1/server/models/victim`, {
      method: 'POST',
      headers: { ...b.auth(), 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
      body: new Uint8Array(multipart(old).payload),
    });
    assert.equal(first.status, 200);
    const modelsDir = join(dataDir, 'models');
    const interrupted = streamUpload(b.port, 'victim', 320, async (i) => {
      if (i < 160) return true; // 10 MiB sent, then wait until the broker is writing the temp file
      await waitUntil(() => readdirSync(modelsDir).some((f) => f.startsWith('.upload-')), 10000, 'upload temp file');
      return false;
    }).catch(() => undefined);
    await waitUntil(() => readdirSync(modelsDir).some((f) => f.startsWith('.upload-')), 15000, 'upload in progress');
    await b.stop('SIGKILL');
    await interrupted;
    assert.deepEqual(readFileSync(join(modelsDir, 'victim')), old, 'the model file was never replaced by a partial one');
    b = await spawnBroker({ SWITCHYARD_DATA_DIR: dataDir });
    const r = await fetch(`http://127.0.0.1:${b.port}/api/v1/server/models/victim`, { headers: b.auth() });
    assert.equal(r.status, 200);
    assert.deepEqual(Buffer.from(await r.arrayBuffer()), old);
    assert.ok(!readdirSync(modelsDir).some((f) => f.startsWith('.upload-')), 'the partial upload was removed at boot');
    assert.ok(existsSync(join(modelsDir, 'big')));
  });
});
