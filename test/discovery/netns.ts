/**
 * A private network namespace for the mDNS tests (`unshare -n`): only a loopback interface, multicast on and the
 * 224.0.0.0/4 route on it, so multicast never reaches the machine's own interfaces. The namespace lives exactly as
 * long as the agent process in it (test/discovery/ns-agent.ts); `close()` ends the agent, which stops the brokers
 * it started, and the kernel removes the namespace with its last process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { CONFIG_DIR, ROOT, tempDir } from '../helpers.js';

export const PYTHON = '/usr/bin/python3';

export class Netns {
  private next = 1;
  private readonly waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private stderr = '';
  private constructor(readonly proc: ChildProcess) {}

  static async create(): Promise<Netns> {
    const script = [
      'set -e',
      'ip link set lo up',
      'ip link set lo multicast on',
      'ip route add 224.0.0.0/4 dev lo',
      `exec "${process.execPath}" --import tsx "${join(ROOT, 'test/discovery/ns-agent.ts')}"`,
    ].join('\n');
    const proc = spawn('unshare', ['-n', 'bash', '-c', script], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    const ns = new Netns(proc);
    proc.stderr!.on('data', (d) => (ns.stderr = (ns.stderr + d).slice(-20000)));
    const ready = new Promise<void>((resolve, reject) => {
      ns.waiting.set(0, { resolve: () => resolve(), reject });
      proc.once('exit', (code) => reject(new Error(`namespace agent exited with ${code}: ${ns.stderr}`)));
    });
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      let m: { id: number; ok: boolean; result?: unknown; error?: string };
      try {
        m = JSON.parse(line);
      } catch {
        return;
      }
      const w = ns.waiting.get(m.id);
      if (!w) return;
      ns.waiting.delete(m.id);
      if (m.ok) w.resolve(m.result);
      else w.reject(new Error(m.error));
    });
    await ready;
    return ns;
  }

  call<T>(op: string, args: Record<string, unknown>): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.proc.stdin!.write(`${JSON.stringify({ id, op, ...args })}\n`);
    });
  }

  /** A broker process in the namespace (config dir and data dir as given). */
  broker(configDir: string, dataDir: string): Promise<{ key: string; pid: number; port: number }> {
    return this.call('broker', { env: { SWITCHYARD_CONFIG_DIR: configDir, SWITCHYARD_DATA_DIR: dataDir } });
  }

  /** A broker inside the agent's own process, with config overrides per section. */
  server(overrides: Record<string, Record<string, unknown>>): Promise<{ key: string; pid: number; port: number; dataDir: string }> {
    return this.call('server', { overrides });
  }

  fetch(url: string, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<{ status: number; body: any }> {
    return this.call('fetch', { url, ...init });
  }

  exec(argv: string[], timeoutMs = 20000, input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return this.call('exec', { argv, timeoutMs, ...(input !== undefined ? { input } : {}) });
  }

  /** Stops a broker (SIGTERM: it says goodbye; SIGKILL: it vanishes without a word). */
  stopBroker(key: string, signal: NodeJS.Signals = 'SIGTERM'): Promise<unknown> {
    return this.call('stop', { key, signal });
  }

  /** Ends the agent (it stops its brokers first; killed after 10 s). */
  async close(): Promise<void> {
    const p = this.proc;
    if (p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.stdin!.end();
    const t = setTimeout(() => p.kill('SIGKILL'), 10000);
    await exited;
    clearTimeout(t);
  }
}

/** A config folder: the shipped sections plus the given YAML files (name → text), which replace shipped ones. */
export function configDir(files: Record<string, string>): string {
  const dir = tempDir('switchyard-disc-conf-');
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(CONFIG_DIR)) if (f.endsWith('.yaml') && !(f in files)) copyFileSync(join(CONFIG_DIR, f), join(dir, f));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

/** A python3-zeroconf browser (Debian's, an independent mDNS implementation): every `_maps._tcp` service it sees in `seconds`, with its TXT. */
export const ZEROCONF_BROWSE = `
import json, sys, time
from zeroconf import Zeroconf, ServiceBrowser, ServiceListener, InterfaceChoice
seconds = float(sys.argv[1]); stype = sys.argv[2]
zc = Zeroconf(interfaces=InterfaceChoice.All)
found = {}
class L(ServiceListener):
    def add_service(self, zc, t, name):
        info = zc.get_service_info(t, name, timeout=3000)
        if info is None:
            found[name] = None
            return
        found[name] = {"port": info.port, "server": info.server,
                       "addresses": info.parsed_addresses(),
                       "txt": {k.decode(): (v.decode() if v is not None else None) for k, v in info.properties.items()}}
    def update_service(self, zc, t, name):
        self.add_service(zc, t, name)
    def remove_service(self, zc, t, name):
        found.pop(name, None)
b = ServiceBrowser(zc, stype, L())
time.sleep(seconds)
zc.close()
print(json.dumps(found))
`;
