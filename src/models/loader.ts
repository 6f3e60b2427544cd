/**
 * Reading a stored model off the main thread. A model file can be large (a 59 MB k-means model took 5.9 s of
 * JSON.parse and setup on the event loop), so the file is read, parsed, checked and measured in a worker thread;
 * the main thread receives either typed arrays (k-means centroids, isolation-forest nodes: transferred, no copy, no
 * per-node work) or, for the kinds the mljs libraries evaluate, a document whose size is bounded by the evaluation
 * budget (so rebuilding the library object on the main thread costs at most that much).
 *
 * Cost of one evaluation, estimated from the model's shape (operations per message), refused above
 * `MessageDaemon.modelStore.maxEvaluationCost`:
 *
 * | kind | cost |
 * |---|---|
 * | k_means | centroids × dimensions |
 * | isolation_forest | trees × deepest path |
 * | linear_regression, decision_tree, naive_bayes, pca | numbers in the model (weights, nodes, means, matrix) |
 *
 * The worker is a WorkerSlot (src/worker-slot.ts, as the password hash pool's): one thread, started on first use,
 * unref'd, ended after 10 s idle (its heap, which held the parsed file, goes with it); its old generation is capped
 * so a hostile file cannot take the process's memory: the load then fails ("could not be loaded") and the model is
 * unusable. A job running longer than two minutes ends the worker and fails the same way. Jobs run one at a time;
 * at most 64 wait (beyond: refused, the model is unusable until used again).
 *
 * Online training runs here too (`train`): the mljs libraries are required in the worker by the absolute paths the
 * main thread resolved, so the event loop never runs a training.
 */
import { open } from 'node:fs/promises';
import { WorkerSlot } from '../worker-slot.js';

export type LoadedModel =
  | { type: 'foreign'; reason: string }
  | { type: 'too-costly'; kind: string; dims: number; cost: number; shape: string }
  | { type: 'k_means'; kind: 'k_means'; dims: number; cost: number; shape: string; k: number; centroids: Float64Array }
  | {
      type: 'isolation_forest';
      kind: 'isolation_forest';
      dims: number;
      cost: number;
      shape: string;
      n: number;
      col: Int32Array;
      val: Float64Array;
      left: Int32Array;
      right: Int32Array;
      leaf: Float64Array;
      roots: Int32Array;
    }
  | { type: 'library'; kind: string; dims: number; cost: number; shape: string; doc: Record<string, unknown> };

const WORKER_SOURCE = String.raw`
const { parentPort } = require('node:worker_threads');
const { openSync, readSync, closeSync, readFileSync } = require('node:fs');
const KINDS = ['k_means', 'linear_regression', 'decision_tree', 'naive_bayes', 'pca', 'isolation_forest'];
function apl(n) { if (n <= 1) return 0; if (n === 2) return 1; return 2 * Math.log(n - 1) + 0.57721 - (2 * (n - 1)) / n; }
function countNumbers(v, limit) {
  let n = 0; const stack = [v];
  while (stack.length) {
    const x = stack.pop();
    if (typeof x === 'number') { if (++n > limit) return n; }
    else if (x !== null && typeof x === 'object') { for (const k in x) stack.push(x[k]); }
  }
  return n;
}
function check(file, maxCost) {
  // a file that does not start like a JSON object is not a Switchyard model (ONNX, ...): no parse
  const fd = openSync(file, 'r');
  const head = Buffer.alloc(64);
  const got = readSync(fd, head, 0, 64, 0);
  closeSync(fd);
  if (!/^\s*\{/.test(head.subarray(0, got).toString('latin1'))) return { type: 'foreign', reason: 'not a Switchyard model (JSON with "format": "switchyard-model")' };
  let doc;
  try { doc = JSON.parse(readFileSync(file, 'utf8')); } catch (e) { return { type: 'foreign', reason: 'not a Switchyard model: ' + e.message }; }
  if (!doc || doc.format !== 'switchyard-model') return { type: 'foreign', reason: 'not a Switchyard model (JSON with "format": "switchyard-model")' };
  const kind = doc.kind;
  if (!KINDS.includes(kind)) return { type: 'foreign', reason: 'unknown model kind ' + String(kind) };
  const dims = Number(doc.dims) || 0;
  const over = (cost, shape) => ({ type: 'too-costly', kind, dims, cost, shape });
  if (kind === 'k_means') {
    const c = doc.centroids;
    if (!Array.isArray(c) || c.length === 0 || !Array.isArray(c[0])) return { type: 'foreign', reason: 'k_means model without centroids' };
    const k = c.length, d = c[0].length;
    const shape = k + ' centroids x ' + d + ' dimensions';
    if (k * d > maxCost) return over(k * d, shape);
    const out = new Float64Array(k * d);
    for (let i = 0; i < k; i++) {
      const row = c[i];
      if (!Array.isArray(row) || row.length !== d) return { type: 'foreign', reason: 'k_means centroid ' + i + ' has ' + (row && row.length) + ' values, not ' + d };
      for (let j = 0; j < d; j++) { const v = row[j]; if (typeof v !== 'number' || !Number.isFinite(v)) return { type: 'foreign', reason: 'k_means centroid ' + i + ' holds a value that is not a number' }; out[i * d + j] = v; }
    }
    return { type: 'k_means', kind, dims: dims || d, cost: k * d, shape, k, centroids: out };
  }
  if (kind === 'isolation_forest') {
    const trees = doc.trees;
    if (!Array.isArray(trees) || trees.length === 0) return { type: 'foreign', reason: 'isolation_forest model without trees' };
    const col = [], val = [], left = [], right = [], leaf = [], roots = [];
    let maxDepth = 0;
    for (const t of trees) {
      // iterative: a hostile tree cannot overflow the stack
      const rootAt = col.length;
      const stack = [[t, -1, 0, 0]];
      while (stack.length) {
        const [node, parent, side, depth] = stack.pop();
        const i = col.length;
        if (depth > maxDepth) maxDepth = depth;
        col.push(0); val.push(0); left.push(-1); right.push(-1); leaf.push(-1);
        if (parent >= 0) { if (side === 0) left[parent] = i; else right[parent] = i; }
        if (!Array.isArray(node)) return { type: 'foreign', reason: 'isolation_forest tree node is not an array' };
        if (node.length === 1) leaf[i] = apl(Number(node[0]) || 0);
        else if (node.length === 4) { col[i] = node[0] | 0; val[i] = Number(node[1]); stack.push([node[3], i, 1, depth + 1], [node[2], i, 0, depth + 1]); }
        else return { type: 'foreign', reason: 'isolation_forest tree node of ' + node.length + ' values' };
      }
      roots.push(rootAt);
    }
    const cost = trees.length * Math.max(1, maxDepth);
    const shape = trees.length + ' trees, deepest path ' + maxDepth;
    if (cost > maxCost) return over(cost, shape);
    return { type: 'isolation_forest', kind, dims, cost, shape, n: Number(doc.n) || 0, col: Int32Array.from(col), val: Float64Array.from(val), left: Int32Array.from(left), right: Int32Array.from(right), leaf: Float64Array.from(leaf), roots: Int32Array.from(roots) };
  }
  const cost = countNumbers(doc, maxCost);
  const shape = cost > maxCost ? 'more than ' + maxCost + ' numbers' : cost + ' numbers';
  if (cost > maxCost) return over(cost, shape);
  return { type: 'library', kind, dims, cost, shape, doc };
}
const mods = {};
const lib = (path) => mods[path] || (mods[path] = require(path));
function compact(n) {
  if (n.left === undefined || n.right === undefined) return [n.trainingSet ? n.trainingSet.length : 0];
  return [n.splitColumn, n.splitValue, compact(n.left), compact(n.right)];
}
// training, as src/models/functions.ts did it on the main thread: returns the stored document as JSON text
function train(m) {
  const { kind, samples, labels, paths } = m;
  let stored;
  switch (kind) {
    case 'k_means': {
      const r = lib(paths.kmeans).kmeans(samples, Math.min(m.clusters, samples.length), { initialization: 'kmeans++', seed: 42 });
      stored = { centroids: r.centroids };
      break;
    }
    case 'linear_regression': {
      const M = lib(paths.mlr);
      stored = { model: new M(samples, labels.map((y) => [Number(y)])).toJSON() };
      break;
    }
    case 'decision_tree':
    case 'naive_bayes': {
      const classes = [...new Set(labels)];
      const y = labels.map((l) => classes.indexOf(l));
      const c = kind === 'decision_tree' ? new (lib(paths.cart).DecisionTreeClassifier)() : new (lib(paths.naiveBayes).GaussianNB)();
      c.train(samples, y);
      stored = { classes, model: c.toJSON() };
      break;
    }
    case 'pca': {
      stored = { model: new (lib(paths.pca).PCA)(samples).toJSON() };
      break;
    }
    case 'isolation_forest': {
      // ml-isolation-forest draws its splits from Math.random: seeded here (as k-means is), so the same samples always
      // give the same forest; the worker runs one job at a time and the swap is undone before anything else runs
      const random = Math.random;
      let a = 42;
      Math.random = () => {
        a = (a + 0x6d2b79f5) | 0;
        let t = Math.imul(a ^ (a >>> 15), 1 | a);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
      };
      try {
        const f = new (lib(paths.isolationForest).IsolationForest)({ nEstimators: 100 });
        f.train(samples);
        stored = { n: samples.length, trees: f.forest.map(compact) };
      } finally {
        Math.random = random;
      }
      break;
    }
    default:
      throw new Error('unknown model kind ' + kind);
  }
  return { type: 'trained', json: JSON.stringify({ ...m.meta, ...stored }) };
}
parentPort.on('message', (m) => {
  let r;
  try { r = m.op === 'train' ? train(m) : check(m.file, m.maxCost); } catch (e) { r = { error: String(e && e.message || e) }; }
  const transfer = [];
  if (r && r.type === 'k_means') transfer.push(r.centroids.buffer);
  if (r && r.type === 'isolation_forest') transfer.push(r.col.buffer, r.val.buffer, r.left.buffer, r.right.buffer, r.leaf.buffer, r.roots.buffer);
  parentPort.postMessage({ id: m.id, result: r }, transfer);
});
`;

/** A training job: the samples, and the absolute paths of the mljs modules (resolved by the caller). */
export interface TrainJob {
  kind: string;
  samples: number[][];
  labels: Array<string | number>;
  clusters: number;
  paths: Record<'kmeans' | 'mlr' | 'cart' | 'naiveBayes' | 'pca' | 'isolationForest', string>;
  /** Fields of the stored document besides the trained ones (format, kind, dims, ...). */
  meta: Record<string, unknown>;
}

interface Job {
  id: number;
  message: Record<string, unknown>;
  resolve: (r: never) => void;
  reject: (e: Error) => void;
}

const NOT_A_MODEL = 'not a Switchyard model (JSON with "format": "switchyard-model")';

/** Whether the file's first 64 bytes start like a JSON object (white space, then `{`), as the worker checks. */
async function startsLikeJsonObject(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(64);
    const { bytesRead } = await fh.read(head, 0, 64, 0);
    return /^\s*\{/.test(head.subarray(0, bytesRead).toString('latin1'));
  } finally {
    await fh.close();
  }
}

const MAX_QUEUED = 64;
const IDLE_MS = 10_000;
/** A load or a training running longer ends the worker and fails (a 59 MB model loads in about 6 s). */
const JOB_TIMEOUT_MS = 120_000;

export class ModelLoader {
  private readonly slot: WorkerSlot;
  private running: Job | undefined;
  private readonly queue: Job[] = [];
  private nextId = 1;
  /** Loads done, for diagnostics. */
  loads = 0;

  /** @param heapLimitMb the worker's old-generation cap (a file that needs more fails to load). */
  constructor(heapLimitMb = 1024, timeoutMs = JOB_TIMEOUT_MS) {
    this.slot = new WorkerSlot({ source: WORKER_SOURCE, name: 'model-loader', resourceLimits: { maxOldGenerationSizeMb: heapLimitMb }, timeoutMs, idleMs: IDLE_MS });
  }

  /** Whether the worker thread is running (it is ended after IDLE_MS without a job). */
  get workerStarted(): boolean {
    return this.slot.started;
  }

  /**
   * Reads, parses and measures a model file in the worker. Rejects when the worker fails (out of memory, I/O). A
   * file that does not start like a JSON object (ONNX and other formats) is answered from its first bytes here, as
   * the worker would: no worker (a V8 isolate of its own, 15-40 MiB) is started to look at a binary upload.
   */
  async load(file: string, maxCost: number): Promise<LoadedModel> {
    if (!(await startsLikeJsonObject(file))) return { type: 'foreign', reason: NOT_A_MODEL };
    return this.submit<LoadedModel>({ op: 'load', file, maxCost });
  }

  /** Trains a model in the worker (the mljs libraries take 0.1-0.6 s for 100 samples); resolves with the stored document's JSON. */
  async train(job: TrainJob): Promise<string> {
    const r = await this.submit<{ type: 'trained'; json: string }>({ op: 'train', ...job });
    return r.json;
  }

  private submit<T>(message: Record<string, unknown>): Promise<T> {
    if (this.queue.length >= MAX_QUEUED) return Promise.reject(new Error(`too many model jobs waiting (${MAX_QUEUED})`));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ id: this.nextId++, message, resolve: resolve as (r: never) => void, reject });
      this.pump();
    });
  }

  private pump(): void {
    if (this.running || this.queue.length === 0) return;
    const job = this.queue.shift()!;
    this.running = job;
    this.slot.run(job.message).then(
      (m) => {
        if (this.running !== job) return;
        this.running = undefined;
        this.loads++;
        const result = m.result as { error?: string } | undefined;
        if (!result || result.error !== undefined) job.reject(new Error(result?.error ?? 'no result'));
        else job.resolve(result as never);
        this.pump();
      },
      (err: Error) => {
        if (this.running !== job) return;
        this.running = undefined;
        job.reject(new Error(`the model could not be loaded: ${err.message}`));
        this.pump();
      },
    );
  }

  /** Ends the worker (waiting jobs fail). */
  async close(): Promise<void> {
    for (const j of this.queue.splice(0)) j.reject(new Error('model loader closed'));
    const r = this.running;
    this.running = undefined;
    r?.reject(new Error('model loader closed'));
    await this.slot.close();
  }
}
