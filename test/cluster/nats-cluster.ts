/**
 * A real three-node NATS cluster with JetStream for the cluster tests: three `nats-server -js` on 127.0.0.1, each
 * with its own store directory, random client and route ports, routes to the other two. Each server is stopped by
 * its pid; `restart(i)` starts one again on the same ports and store.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { freePort } from '../links/helpers.js';

export interface NatsNode {
  name: string;
  port: number;
  clusterPort: number;
  url: string;
  storeDir: string;
  proc?: ChildProcess;
  output: string;
}

export interface NatsCluster {
  nodes: NatsNode[];
  urls: string[];
  stop(i: number, signal?: NodeJS.Signals): Promise<void>;
  restart(i: number): Promise<void>;
  /** Stops every server and removes the stores. */
  dispose(): Promise<void>;
}

export async function startNatsCluster(size = 3, clusterName = `sy-test-${process.pid}`): Promise<NatsCluster> {
  const nodes: NatsNode[] = [];
  for (let i = 0; i < size; i++) {
    const port = await freePort();
    const clusterPort = await freePort();
    nodes.push({ name: `n${i + 1}`, port, clusterPort, url: `nats://127.0.0.1:${port}`, storeDir: mkdtempSync(join(tmpdir(), 'switchyard-natscl-')), output: '' });
  }
  const launch = (n: NatsNode): Promise<void> => {
    const routes = nodes.filter((o) => o !== n).map((o) => `nats://127.0.0.1:${o.clusterPort}`).join(',');
    const args = ['-js', '-sd', n.storeDir, '-a', '127.0.0.1', '-p', String(n.port), '--server_name', n.name, '--cluster_name', clusterName, '--cluster', `nats://127.0.0.1:${n.clusterPort}`, '--routes', routes];
    const p = spawn('nats-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    n.proc = p;
    n.output = '';
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nats-server ${n.name} did not start in 15 s:\n${n.output}`)), 15000);
      const onData = (d: Buffer) => {
        n.output += d.toString();
        if (n.output.length > 200_000) n.output = n.output.slice(-100_000);
        if (n.output.includes('Server is ready')) {
          clearTimeout(timer);
          resolve();
        }
      };
      p.stdout!.on('data', onData);
      p.stderr!.on('data', onData);
      p.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`nats-server ${n.name} exited with ${code}:\n${n.output}`));
      });
    });
  };
  const stop = async (i: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    const p = nodes[i]!.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    process.kill(p.pid!, signal);
    await exited;
  };
  await Promise.all(nodes.map(launch));
  const cluster: NatsCluster = {
    nodes,
    urls: nodes.map((n) => n.url),
    stop,
    restart: async (i) => {
      await stop(i);
      for (let attempt = 0; ; attempt++) {
        try {
          await launch(nodes[i]!);
          return;
        } catch (err) {
          if (attempt >= 20) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    },
    dispose: async () => {
      for (let i = 0; i < nodes.length; i++) await stop(i);
      for (const n of nodes) rmSync(n.storeDir, { recursive: true, force: true });
    },
  };
  await waitForJetStream(cluster.urls);
  return cluster;
}

/** Resolves once the cluster's JetStream has a meta leader (an account info request answers). */
async function waitForJetStream(urls: string[]): Promise<void> {
  const nc = await connect({ servers: urls });
  try {
    const end = Date.now() + 30000;
    for (;;) {
      try {
        const jsm = await jetstreamManager(nc, { timeout: 2000 });
        await jsm.getAccountInfo();
        return;
      } catch (err) {
        if (Date.now() > end) throw new Error(`JetStream of the NATS cluster not ready in 30 s: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  } finally {
    await nc.close();
  }
}
