/**
 * Full garbage collection in a Node broker process from outside, over the inspector protocol
 * (`HeapProfiler.collectGarbage`, which also shrinks V8's young generation). The memory scenario starts the Node
 * brokers with `--inspect=127.0.0.1:0` and collects before each RSS sample, so the figure is memory the connections
 * hold, not garbage that V8's memory reducer would return a few seconds later anyway.
 */
import type { ChildProcess } from 'node:child_process';
import WebSocket from 'ws';

export interface Collector {
  gc(): Promise<void>;
  /** Any inspector method (bench/mqtt/alloc.ts: the sampling heap profiler); resolves with its result. */
  call(method: string, params?: object): Promise<Record<string, unknown>>;
  close(): void;
}

/** Waits for the "Debugger listening on ws://..." line of a process started with --inspect and connects. */
export async function inspectorOf(proc: ChildProcess): Promise<Collector> {
  const url = await new Promise<string>((res, rej) => {
    let err = '';
    const t = setTimeout(() => rej(new Error(`no inspector URL: ${err}`)), 30000);
    proc.stderr!.on('data', (d: Buffer) => {
      err += d;
      const m = /ws:\/\/\S+/.exec(err);
      if (m) {
        clearTimeout(t);
        res(m[0]);
      }
    });
  });
  const ws = new WebSocket(url);
  await new Promise<void>((res, rej) => {
    ws.once('open', () => res());
    ws.once('error', rej);
  });
  let seq = 0;
  const pending = new Map<number, (result: Record<string, unknown>) => void>();
  ws.on('message', (d) => {
    const m = JSON.parse(String(d)) as { id?: number; result?: Record<string, unknown> };
    if (m.id !== undefined) pending.get(m.id)?.(m.result ?? {});
  });
  const call = (method: string, params?: object) =>
    new Promise<Record<string, unknown>>((res) => {
      const id = ++seq;
      pending.set(id, (result) => {
        pending.delete(id);
        res(result);
      });
      ws.send(JSON.stringify({ id, method, params }));
    });
  return {
    gc: () => call('HeapProfiler.collectGarbage').then(() => undefined),
    call,
    close: () => ws.close(),
  };
}
