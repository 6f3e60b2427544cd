/**
 * Runs INSIDE a network namespace the discovery tests create (test/discovery/netns.ts): the test process is outside
 * it, so this agent starts the brokers, does the HTTP requests and runs the independent mDNS client for it. One JSON
 * request per stdin line, one JSON answer per stdout line: {id, ok, result} or {id, ok: false, error}. Every broker
 * it started is stopped (by its pid) when stdin closes.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { spawnBroker, startServer, type BrokerProcess, type TestServer } from '../helpers.js';

const brokers = new Map<string, BrokerProcess>();
const servers = new Map<string, TestServer>();
let seq = 0;

type Request =
  | { id: number; op: 'broker'; env: Record<string, string> }
  | { id: number; op: 'server'; overrides: Record<string, Record<string, unknown>> }
  | { id: number; op: 'stop'; key: string; signal?: NodeJS.Signals }
  | { id: number; op: 'fetch'; url: string; method?: string; headers?: Record<string, string>; body?: unknown }
  | { id: number; op: 'exec'; argv: string[]; timeoutMs?: number; input?: string };

function exec(argv: string[], timeoutMs: number, input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('error', (err) => {
      clearTimeout(t);
      resolve({ code: -1, stdout, stderr: stderr + err.message });
    });
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
    p.stdin.end(input ?? '');
  });
}

async function handle(req: Request): Promise<unknown> {
  switch (req.op) {
    case 'broker': {
      const b = await spawnBroker(req.env);
      const key = `b${++seq}`;
      brokers.set(key, b);
      return { key, pid: b.proc.pid, port: b.port };
    }
    case 'server': {
      // in this process (cheaper than a broker process on a loaded machine); REST on a random port of 127.0.0.1
      const s = await startServer({ overrides: req.overrides as never });
      await s.app.listen({ port: 0, host: '127.0.0.1' });
      const key = `s${++seq}`;
      servers.set(key, s);
      return { key, pid: process.pid, port: (s.app.server.address() as { port: number }).port, dataDir: s.dataDir };
    }
    case 'stop': {
      const s = servers.get(req.key);
      if (s) {
        servers.delete(req.key);
        await s.close();
        return { code: 0 };
      }
      const b = brokers.get(req.key);
      brokers.delete(req.key);
      return { code: await b?.stop(req.signal) };
    }
    case 'fetch': {
      const res = await fetch(req.url, {
        method: req.method ?? 'GET',
        headers: { ...(req.body !== undefined ? { 'content-type': 'application/json' } : {}), ...(req.headers ?? {}) },
        ...(req.body !== undefined ? { body: JSON.stringify(req.body) } : {}),
      });
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      return { status: res.status, body };
    }
    case 'exec':
      return exec(req.argv, req.timeoutMs ?? 20000, req.input);
  }
}

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let req: Request;
  try {
    req = JSON.parse(line) as Request;
  } catch {
    return;
  }
  handle(req).then(
    (result) => process.stdout.write(`${JSON.stringify({ id: req.id, ok: true, result })}\n`),
    (err) => process.stdout.write(`${JSON.stringify({ id: req.id, ok: false, error: String((err as Error)?.stack ?? err) })}\n`),
  );
});
rl.on('close', () => {
  void Promise.all([...[...brokers.values()].map((b) => b.stop()), ...[...servers.values()].map((s) => s.close().catch(() => {}))]).then(() => process.exit(0));
});
process.stdout.write(`${JSON.stringify({ id: 0, ok: true, result: 'ready' })}\n`);
