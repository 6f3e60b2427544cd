/**
 * Model functions of the selector language, over message fields (the REST `dataMap` entries a selector sees):
 *
 * | function | value |
 * |---|---|
 * | `model_exists('m')` | TRUE when the store holds model `m` |
 * | `k_means('m', f1, f2, ...)` | the index of the nearest cluster centre (ml-kmeans; 3 clusters when trained here) |
 * | `linear_regression('m', x1, ..., y)` | the prediction of y from x1.. (ml-regression-multivariate-linear); y is only read while training |
 * | `decision_tree('m', x1, ..., label)` | the predicted label (ml-cart); the label is only read while training |
 * | `naive_bayes('m', x1, ..., label)` | the predicted label (ml-naivebayes, Gaussian) |
 * | `pca('m', f1, f2, ...)` | the sample's score on the first principal component (ml-pca) |
 * | `isolation_forest('m', f1, f2, ...)` | the anomaly score, 0..1, higher = more anomalous (ml-isolation-forest) |
 *
 * A model that is in the store is used as is (uploaded through `POST /api/v1/server/models/{name}` or trained
 * earlier). A model that is not is trained online: the first `MessageDaemon.modelStore.trainingSamples` samples
 * that reach the function (from any subscription using it) are collected, the model is trained on them and saved to
 * the store, so it survives a restart. While it trains, and whenever a field is missing or not a number, the
 * function is NULL (unknown): the selector does not match, nothing is thrown into the delivery path.
 *
 * Stored form: JSON `{"format": "switchyard-model", "kind": "<function>", "dims": <fields>, ...}` (see `serialise`).
 * A stored file of another kind or format (an ONNX file, a model for another function) evaluates as unknown.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as mlCart from 'ml-cart';
import type * as mlIsolationForest from 'ml-isolation-forest';
import type * as mlKmeans from 'ml-kmeans';
import type * as mlNaiveBayes from 'ml-naivebayes';
import type * as mlPca from 'ml-pca';
import type MLR from 'ml-regression-multivariate-linear';
import { registerSelectorFunction, type SelectorFunction, type SelectorValue } from '../engine/selector/selector.js';
import type { ModelStore } from './store.js';
import { checkModelName } from './store.js';

// The mljs libraries are loaded when a model is first trained or loaded (synchronously, through require: all of them
// ship CommonJS), not at start: an idle broker whose selectors use no model function never needs their code or heap.
const requireLazily = createRequire(import.meta.url);
const ml = {
  cart: () => requireLazily('ml-cart') as typeof mlCart,
  isolationForest: () => requireLazily('ml-isolation-forest') as typeof mlIsolationForest,
  kmeans: () => requireLazily('ml-kmeans') as typeof mlKmeans,
  naiveBayes: () => requireLazily('ml-naivebayes') as typeof mlNaiveBayes,
  pca: () => requireLazily('ml-pca') as typeof mlPca,
  mlr: () => requireLazily('ml-regression-multivariate-linear') as typeof MLR,
};

export const MODEL_KINDS = ['k_means', 'linear_regression', 'decision_tree', 'naive_bayes', 'pca', 'isolation_forest'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];
const SUPERVISED = new Set<ModelKind>(['linear_regression', 'decision_tree', 'naive_bayes']);
const K_MEANS_CLUSTERS = 3;
/** Largest stored model read synchronously when a selector first uses it (larger: unknown). */
const MAX_LOAD_BYTES = 64 * 1024 * 1024;

type Predictor = (features: number[]) => SelectorValue;

interface ModelState {
  kind: ModelKind;
  status: 'training' | 'ready' | 'unusable';
  samples: number[][];
  labels: Array<string | number>;
  predict?: Predictor;
  dims: number;
  reason?: string;
}

function num(v: SelectorValue): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v === 'string' && v.trim() !== '') {
    const n = Number(v);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

// ---- isolation forest: ml-isolation-forest has no toJSON/load; its trees are plain nodes, stored compactly

export type CompactTree = [number] | [number, number, CompactTree, CompactTree];
interface TreeNodeLike {
  left?: TreeNodeLike;
  right?: TreeNodeLike;
  splitColumn?: number;
  splitValue?: number;
  trainingSet?: { length: number };
}
function compactTree(n: TreeNodeLike): CompactTree {
  if (n.left === undefined || n.right === undefined) return [n.trainingSet?.length ?? 0];
  return [n.splitColumn!, n.splitValue!, compactTree(n.left), compactTree(n.right)];
}
let treeProto: object | undefined;
function treeNodeProto(): object {
  if (!treeProto) {
    const f = new (ml.isolationForest().IsolationForest)({ nEstimators: 1 });
    f.train([[0], [1]]);
    treeProto = Object.getPrototypeOf(f.forest[0]) as object;
  }
  return treeProto;
}
function restoreTree(c: CompactTree): TreeNodeLike {
  const node = Object.create(treeNodeProto()) as TreeNodeLike;
  if (c.length === 1) node.trainingSet = { length: c[0] };
  else {
    node.splitColumn = c[0];
    node.splitValue = c[1];
    node.left = restoreTree(c[2]);
    node.right = restoreTree(c[3]);
  }
  return node;
}

/**
 * The library forest (restored from its stored trees), as the reference implementation of a prediction; the
 * broker scores with `flatForest`, which gives the same scores (test/models/model-functions.test.ts compares them).
 */
export function libraryForest(stored: { n: number; trees: CompactTree[] }): (x: number[]) => number {
  const f = new (ml.isolationForest().IsolationForest)({ nEstimators: stored.trees.length });
  f.trainingSet = { length: stored.n };
  f.forest = stored.trees.map(restoreTree);
  return (x) => f.predict([x])[0]!;
}

/** ml-isolation-forest's average path length c(n) of an unsuccessful search in a tree of n points. */
function averagePathLength(n: number): number {
  if (n <= 1) return 0;
  if (n === 2) return 1;
  return 2 * Math.log(n - 1) + 0.57721 - (2 * (n - 1)) / n;
}

/**
 * The trained trees of ml-isolation-forest laid out in typed arrays: the library walks its nodes through
 * polymorphic objects (about 120 us per score with 100 trees here); this walks the same splits in a few us.
 * Score = 2^(-mean path length / c(n)), as the library computes it.
 */
function flatForest(trees: CompactTree[], n: number): Predictor {
  const col: number[] = [];
  const val: number[] = [];
  const left: number[] = [];
  const right: number[] = [];
  const leaf: number[] = []; // c(size) of a leaf, -1 for an inner node
  const roots: number[] = [];
  const add = (t: CompactTree): number => {
    const i = col.length;
    col.push(0);
    val.push(0);
    left.push(-1);
    right.push(-1);
    leaf.push(-1);
    if (t.length === 1) leaf[i] = averagePathLength(t[0]);
    else {
      col[i] = t[0];
      val[i] = t[1];
      left[i] = add(t[2]);
      right[i] = add(t[3]);
    }
    return i;
  };
  for (const t of trees) roots.push(add(t));
  const C = Int32Array.from(col);
  const V = Float64Array.from(val);
  const L = Int32Array.from(left);
  const R = Int32Array.from(right);
  const LEAF = Float64Array.from(leaf);
  const norm = averagePathLength(n);
  const count = roots.length;
  return (x) => {
    let total = 0;
    for (let t = 0; t < count; t++) {
      let i = roots[t]!;
      let depth = 0;
      while (LEAF[i]! < 0) {
        i = x[C[i]!]! < V[i]! ? L[i]! : R[i]!;
        depth++;
      }
      total += depth + LEAF[i]!;
    }
    return 2 ** (-(total / count) / norm);
  };
}

// ---- training and (de)serialisation per kind

function train(kind: ModelKind, samples: number[][], labels: Array<string | number>): { stored: Record<string, unknown>; predict: Predictor } {
  switch (kind) {
    case 'k_means': {
      const r = ml.kmeans().kmeans(samples, Math.min(K_MEANS_CLUSTERS, samples.length), { initialization: 'kmeans++', seed: 42 });
      return { stored: { centroids: r.centroids }, predict: load(kind, { centroids: r.centroids }) };
    }
    case 'linear_regression': {
      const m = new (ml.mlr())(samples, labels.map((y) => [Number(y)]));
      return { stored: { model: m.toJSON() }, predict: load(kind, { model: m.toJSON() }) };
    }
    case 'decision_tree':
    case 'naive_bayes': {
      const classes = [...new Set(labels)];
      const y = labels.map((l) => classes.indexOf(l));
      const m = kind === 'decision_tree' ? new (ml.cart().DecisionTreeClassifier)() : new (ml.naiveBayes().GaussianNB)();
      m.train(samples, y);
      const stored = { classes, model: m.toJSON() };
      return { stored, predict: load(kind, stored) };
    }
    case 'pca': {
      const m = new (ml.pca().PCA)(samples);
      return { stored: { model: m.toJSON() }, predict: load(kind, { model: m.toJSON() }) };
    }
    case 'isolation_forest': {
      const f = new (ml.isolationForest().IsolationForest)({ nEstimators: 100 });
      f.train(samples);
      const stored = { n: samples.length, trees: f.forest.map((t) => compactTree(t as TreeNodeLike)) };
      return { stored, predict: load(kind, stored) };
    }
  }
}

function load(kind: ModelKind, stored: Record<string, unknown>): Predictor {
  switch (kind) {
    case 'k_means': {
      const centroids = stored.centroids as number[][];
      if (!Array.isArray(centroids) || centroids.length === 0) throw new Error('no centroids');
      return (x) => {
        let best = 0;
        let bestD = Infinity;
        for (let c = 0; c < centroids.length; c++) {
          const cc = centroids[c]!;
          let d = 0;
          for (let i = 0; i < x.length; i++) d += (x[i]! - cc[i]!) ** 2;
          if (d < bestD) {
            bestD = d;
            best = c;
          }
        }
        return best;
      };
    }
    case 'linear_regression': {
      const m = ml.mlr().load(stored.model as never);
      return (x) => m.predict(x)[0] ?? null;
    }
    case 'decision_tree':
    case 'naive_bayes': {
      const classes = stored.classes as Array<string | number>;
      const m = kind === 'decision_tree' ? ml.cart().DecisionTreeClassifier.load(stored.model) : ml.naiveBayes().GaussianNB.load(stored.model);
      return (x) => {
        const i = m.predict([x])[0];
        return i === undefined ? null : (classes[i] ?? null);
      };
    }
    case 'pca': {
      const m = ml.pca().PCA.load(stored.model as never);
      return (x) => m.predict([x], { nComponents: 1 }).get(0, 0);
    }
    case 'isolation_forest': {
      const trees = stored.trees as CompactTree[];
      if (!Array.isArray(trees) || trees.length === 0) throw new Error('no trees');
      return flatForest(trees, Number(stored.n));
    }
  }
}

function listSync(dir: string): string[] {
  try {
    return readdirSync(dir).filter((f) => !f.startsWith('.'));
  } catch {
    return [];
  }
}

/** The predictor of a stored model document (what the selector functions use). */
export function predictorOf(doc: Record<string, unknown>): (x: number[]) => SelectorValue {
  return load(doc.kind as ModelKind, doc);
}

export interface ModelFunctionStats {
  trained: number;
  loaded: number;
  saveFailures: number;
}

/**
 * The model functions bound to one model store. `register()` makes them callable from selectors; the store's
 * `onChange` drops a cached model so an upload replaces it.
 */
export class ModelFunctions {
  private readonly states = new Map<string, ModelState>();
  readonly stats: ModelFunctionStats = { trained: 0, loaded: 0, saveFailures: 0 };
  private names: Set<string>;

  constructor(
    private readonly store: ModelStore,
    private readonly trainingSamples: number,
    private readonly onError?: (name: string, err: unknown) => void,
  ) {
    this.names = new Set(listSync(store.dir));
    store.onChange = (name) => {
      this.states.delete(name);
      if (this.exists(name)) this.names.add(name);
      else this.names.delete(name);
    };
  }

  /** Registers model_exists and the six model functions with the selector language. */
  register(): void {
    registerSelectorFunction('model_exists', {
      bind: (literals) => {
        const name = this.modelNameArg(literals, 1, 1);
        return () => this.names.has(name);
      },
    });
    for (const kind of MODEL_KINDS) registerSelectorFunction(kind, this.fn(kind));
  }

  private exists(name: string): boolean {
    try {
      return statSync(join(this.store.dir, name)).isFile();
    } catch {
      return false;
    }
  }

  private modelNameArg(literals: readonly (SelectorValue | undefined)[], min: number, max: number): string {
    if (literals.length < min || literals.length > max) {
      throw new Error(max === min ? `takes ${min} argument${min > 1 ? 's' : ''}` : `takes the model name and ${min - 1} to ${max - 1} fields`);
    }
    const name = literals[0];
    if (typeof name !== 'string') throw new Error("the first argument must be the model name as a string literal, e.g. 'temperature'");
    try {
      return checkModelName(name);
    } catch (err) {
      throw new Error((err as Error).message);
    }
  }

  private fn(kind: ModelKind): SelectorFunction {
    const supervised = SUPERVISED.has(kind);
    return {
      bind: (literals) => {
        const name = this.modelNameArg(literals, supervised ? 3 : 2, 65);
        this.stateOf(name, kind); // load a stored model now, not in the delivery path
        return (args) => this.evaluate(name, kind, supervised, args);
      },
    };
  }

  /** The state of a model: loaded from the store when there, else a fresh training state. */
  private stateOf(name: string, kind: ModelKind): ModelState {
    let st = this.states.get(name);
    if (st) return st;
    st = { kind, status: 'training', samples: [], labels: [], dims: 0 };
    const file = join(this.store.dir, name);
    if (this.exists(name)) {
      try {
        if (statSync(file).size > MAX_LOAD_BYTES) throw new Error(`larger than ${MAX_LOAD_BYTES} bytes`);
        const doc = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
        if (doc.format !== 'switchyard-model') throw new Error('not a Switchyard model (JSON with "format": "switchyard-model")');
        if (doc.kind !== kind) throw new Error(`a ${String(doc.kind)} model, used as ${kind}`);
        st.predict = load(kind, doc);
        st.dims = Number(doc.dims) || 0;
        st.status = 'ready';
        this.stats.loaded++;
      } catch (err) {
        st.status = 'unusable';
        st.reason = (err as Error).message;
        this.onError?.(name, err);
      }
    }
    this.states.set(name, st);
    return st;
  }

  private evaluate(name: string, kind: ModelKind, supervised: boolean, args: readonly SelectorValue[]): SelectorValue {
    const st = this.stateOf(name, kind);
    if (st.status === 'unusable' || st.kind !== kind) return null;
    const nFeatures = supervised ? args.length - 2 : args.length - 1;
    const features = new Array<number>(nFeatures);
    for (let i = 0; i < nFeatures; i++) {
      const v = num(args[i + 1]!);
      if (v === undefined) return null;
      features[i] = v;
    }
    if (st.status === 'ready') {
      if (st.dims !== 0 && st.dims !== nFeatures) return null;
      return st.predict!(features);
    }
    // training: collect the sample (a supervised one needs its target)
    let label: string | number | undefined;
    if (supervised) {
      const t = args[args.length - 1]!;
      label = kind === 'linear_regression' ? num(t) : typeof t === 'string' || typeof t === 'number' ? t : typeof t === 'boolean' ? String(t) : undefined;
      if (label === undefined) return null;
    }
    if (st.samples.length > 0 && st.samples[0]!.length !== nFeatures) return null;
    st.samples.push(features);
    if (label !== undefined) st.labels.push(label);
    if (st.samples.length >= this.trainingSamples) this.trainNow(name, st);
    return null;
  }

  private trainNow(name: string, st: ModelState): void {
    try {
      const { stored, predict } = train(st.kind, st.samples, st.labels);
      const dims = st.samples[0]!.length;
      st.predict = predict;
      st.dims = dims;
      st.status = 'ready';
      st.samples = [];
      st.labels = [];
      this.stats.trained++;
      const doc = { format: 'switchyard-model', kind: st.kind, dims, trainedAt: new Date().toISOString(), samples: this.trainingSamples, ...stored };
      this.names.add(name);
      void this.store.writeBuffer(name, Buffer.from(JSON.stringify(doc)), false).then(
        () => {},
        (err) => {
          this.names.delete(name);
          this.stats.saveFailures++;
          this.onError?.(name, err);
        },
      );
    } catch (err) {
      st.status = 'unusable';
      st.reason = `training failed: ${(err as Error).message}`;
      st.samples = [];
      this.onError?.(name, err);
    }
  }

  /** What the functions know of a model (for diagnostics and tests). */
  describe(name: string): { kind: ModelKind; status: string; samples: number; reason?: string } | undefined {
    const st = this.states.get(name);
    return st && { kind: st.kind, status: st.status, samples: st.samples.length, ...(st.reason ? { reason: st.reason } : {}) };
  }
}
