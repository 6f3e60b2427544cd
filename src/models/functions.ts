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
 * earlier), loaded off the event loop (loader.ts) and shared by every subscription using it. A model that is not is
 * trained online, when a caller holding train_model started it (access.ts): the first
 * `MessageDaemon.modelStore.trainingSamples` samples that reach the function (from any subscription using it) are
 * collected, the model is trained on them and saved to the store, so it survives a restart. While it loads or trains,
 * and whenever a field is missing or not a number, the function is NULL (unknown): the selector does not match,
 * nothing is thrown into the delivery path. A selector nobody holds (CompiledSelector.acquire) is NULL too.
 *
 * Stored form: JSON `{"format": "switchyard-model", "kind": "<function>", "dims": <fields>, ...}` (see `serialise`).
 * A stored file of another kind or format (an ONNX file, a model for another function) evaluates as unknown.
 */
import { createRequire } from 'node:module';
import type * as mlCart from 'ml-cart';
import type * as mlIsolationForest from 'ml-isolation-forest';
import type * as mlKmeans from 'ml-kmeans';
import type * as mlNaiveBayes from 'ml-naivebayes';
import type * as mlPca from 'ml-pca';
import type MLR from 'ml-regression-multivariate-linear';
import { registerSelectorFunction, type CompiledSelector, type SelectorFunction, type SelectorValue } from '../engine/selector/selector.js';
import { ModelLoader, type LoadedModel, type TrainJob } from './loader.js';
import type { ModelSlot, ModelStore } from './store.js';
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

let resolvedPaths: TrainJob['paths'] | undefined;
/** Absolute paths of the mljs modules, for the loader's worker (which trains). */
function mlPaths(): TrainJob['paths'] {
  resolvedPaths ??= {
    kmeans: requireLazily.resolve('ml-kmeans'),
    mlr: requireLazily.resolve('ml-regression-multivariate-linear'),
    cart: requireLazily.resolve('ml-cart'),
    naiveBayes: requireLazily.resolve('ml-naivebayes'),
    pca: requireLazily.resolve('ml-pca'),
    isolationForest: requireLazily.resolve('ml-isolation-forest'),
  };
  return resolvedPaths;
}

export const MODEL_KINDS = ['k_means', 'linear_regression', 'decision_tree', 'naive_bayes', 'pca', 'isolation_forest'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];
const SUPERVISED = new Set<ModelKind>(['linear_regression', 'decision_tree', 'naive_bayes']);
const K_MEANS_CLUSTERS = 3;

type Predictor = (features: number[]) => SelectorValue;

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
  return forestPredictor(Int32Array.from(col), Float64Array.from(val), Int32Array.from(left), Int32Array.from(right), Float64Array.from(leaf), Int32Array.from(roots), n);
}

/** The score over a forest laid out in typed arrays (as flatForest builds them, or the loader's worker). */
function forestPredictor(C: Int32Array, V: Float64Array, L: Int32Array, R: Int32Array, LEAF: Float64Array, roots: Int32Array, n: number): Predictor {
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

/** The nearest of k centroids of d dimensions laid out in one array. */
function kMeansPredictor(c: Float64Array, k: number, d: number): Predictor {
  return (x) => {
    let best = 0;
    let bestD = Infinity;
    for (let j = 0; j < k; j++) {
      let dist = 0;
      const o = j * d;
      for (let i = 0; i < d; i++) dist += (x[i]! - c[o + i]!) ** 2;
      if (dist < bestD) {
        bestD = dist;
        best = j;
      }
    }
    return best;
  };
}

// ---- training and (de)serialisation per kind

// (training runs in the loader's worker: src/models/loader.ts, the same calls as these loads' counterparts)

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

/** The predictor of a stored model document (what the selector functions use). */
export function predictorOf(doc: Record<string, unknown>): (x: number[]) => SelectorValue {
  return load(doc.kind as ModelKind, doc);
}

/** The predictor of a model the loader's worker read. */
function predictorOfLoaded(r: Exclude<LoadedModel, { type: 'foreign' } | { type: 'too-costly' }>): Predictor {
  switch (r.type) {
    case 'k_means':
      return kMeansPredictor(r.centroids, r.k, r.centroids.length / r.k);
    case 'isolation_forest':
      return forestPredictor(r.col, r.val, r.left, r.right, r.leaf, r.roots, r.n);
    case 'library':
      return load(r.kind as ModelKind, r.doc);
  }
}

export interface ModelFunctionStats {
  trained: number;
  loaded: number;
  saveFailures: number;
  /** Models held in memory now (loaded, loading, training): one per model name, whatever the number of users. */
  models: number;
  /** Uses of those models now (subscriptions, requests evaluating a list filter). */
  leases: number;
  /** Sum of the evaluation costs of the loaded models (operations per message for a selector calling each once). */
  cost: number;
  /** Samples held by models being trained. */
  samples: number;
}

/** A model a selector names, and whether this use may train it (a selector naming a model not in the store). */
export interface ModelUse {
  name: string;
  /** The function, or 'model_exists' (which holds nothing). */
  fn: ModelKind | 'model_exists';
}

/** What one use of a selector holds: released once (the subscription or the request ended). */
export interface ModelLease {
  /** Resolves when every model it names is loaded (or failed to load). */
  ready: Promise<void>;
  /** Why a model it names cannot be used at all (too costly to evaluate), or undefined. */
  refusal(): string | undefined;
  release(): void;
}

interface ModelState {
  name: string;
  /** Uses holding it; at 0 it is dropped (its memory freed, its maxModels place given back). */
  leases: number;
  status: 'loading' | 'ready' | 'absent' | 'training' | 'unusable';
  /** Bumped at every load start and at drop, so a load that ends late changes nothing. */
  generation: number;
  loaded: Promise<void>;
  kind?: ModelKind;
  predict?: Predictor;
  dims: number;
  cost: number;
  samples: number[][];
  labels: Array<string | number>;
  /** The maxModels place of a model being trained (reserved when its training starts). */
  slot?: ModelSlot;
  /** Its samples are with the loader's worker, being trained on. */
  fitting?: boolean;
  reason?: string;
  tooCostly?: boolean;
}

export interface ModelFunctionsOptions {
  trainingSamples: number;
  /** Largest estimated evaluation cost (operations per message) of a model (loader.ts says how it is estimated). */
  maxEvaluationCost?: number;
  onError?: (name: string, err: unknown) => void;
  loader?: ModelLoader;
}

/** The model names a compiled selector calls, once each (the first function naming a model wins). */
export function modelUsesOf(compiled: CompiledSelector): ModelUse[] {
  const out = new Map<string, ModelUse>();
  for (const c of compiled.calls) {
    if (c.name !== 'model_exists' && !(MODEL_KINDS as readonly string[]).includes(c.name)) continue;
    const name = c.literals[0];
    if (typeof name !== 'string' || out.has(name)) continue;
    out.set(name, { name, fn: c.name as ModelUse['fn'] });
  }
  return [...out.values()];
}

/**
 * The model functions bound to one model store. `register()` makes them callable from selectors.
 *
 * Memory: a model is held once per name, whatever the number of subscriptions using it, and only while something
 * holds it: a subscription's selector (CompiledSelector.acquire, released by the engine when the subscription
 * ends) or a request evaluating a list filter. At the last release it is dropped. A selector evaluated without a
 * hold (nothing acquired it) answers unknown. The models held are at most `maxModels` (stored or being trained),
 * each at most `maxEvaluationCost` numbers of parameters (or trees × depth).
 *
 * Loading runs in the loader's worker (never on the event loop); the function is unknown until the model is loaded.
 * Training online (a model not in the store) is started only by `use(..., { train: true })`, which the access check
 * calls for a caller holding train_model on the model; it takes a maxModels place at once (409 when full) and gives
 * it back if every user leaves before it is trained.
 */
export class ModelFunctions {
  private readonly states = new Map<string, ModelState>();
  private readonly st: Omit<ModelFunctionStats, 'models' | 'leases' | 'cost' | 'samples'> = { trained: 0, loaded: 0, saveFailures: 0 };
  readonly loader: ModelLoader;
  readonly trainingSamples: number;
  readonly maxEvaluationCost: number;
  private readonly onError?: (name: string, err: unknown) => void;

  constructor(
    private readonly store: ModelStore,
    opts: ModelFunctionsOptions | number,
    onError?: (name: string, err: unknown) => void,
  ) {
    const o: ModelFunctionsOptions = typeof opts === 'number' ? { trainingSamples: opts } : opts;
    this.trainingSamples = o.trainingSamples;
    this.maxEvaluationCost = o.maxEvaluationCost ?? 100_000;
    this.onError = o.onError ?? onError;
    this.loader = o.loader ?? new ModelLoader();
    store.onChange = (name) => this.changed(name);
  }

  get stats(): ModelFunctionStats {
    let leases = 0;
    let cost = 0;
    let samples = 0;
    for (const s of this.states.values()) {
      leases += s.leases;
      if (s.status === 'ready') cost += s.cost;
      samples += s.samples.length;
    }
    return { ...this.st, models: this.states.size, leases, cost, samples };
  }

  /** Registers model_exists and the six model functions with the selector language. */
  register(): void {
    registerSelectorFunction('model_exists', {
      bind: (literals) => {
        const name = this.modelNameArg(literals, 1, 1);
        return () => this.store.has(name);
      },
    });
    for (const kind of MODEL_KINDS) registerSelectorFunction(kind, this.fn(kind));
  }

  /** True when the model can be used without training it (in the store, or trained here). */
  available(name: string): boolean {
    return this.store.has(name) || this.states.get(name)?.status === 'ready';
  }

  /**
   * Holds the models a selector names for one use. With `train`, a model not in the store starts training (its
   * maxModels place is taken now: ConflictError 409 when the store is full). Release it once.
   */
  use(compiled: CompiledSelector, opts: { train: boolean }): ModelLease {
    const held: ModelState[] = [];
    try {
      for (const u of modelUsesOf(compiled)) {
        if (u.fn === 'model_exists') continue;
        const st = this.hold(u.name);
        held.push(st);
        if (opts.train && st.status === 'absent') this.startTraining(st, u.fn);
      }
    } catch (err) {
      for (const st of held) this.drop(st);
      throw err;
    }
    let done = false;
    return {
      ready: Promise.all(held.map((s) => s.loaded)).then(() => {}),
      refusal: () => held.find((s) => s.tooCostly)?.reason,
      release: () => {
        if (done) return;
        done = true;
        for (const st of held) this.drop(st);
      },
    };
  }

  /** Drops every model held (the server tree stops; the engine and its subscriptions go with it). */
  clear(): void {
    for (const st of this.states.values()) {
      st.generation++;
      st.slot?.release();
    }
    this.states.clear();
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
        return (args) => this.evaluate(name, kind, supervised, args);
      },
      acquire: (literals) => {
        const st = this.hold(literals[0] as string);
        return once(() => this.drop(st));
      },
    };
  }

  /** The state of a model, held once more: loaded (in the worker) when the store has it. */
  private hold(name: string): ModelState {
    let st = this.states.get(name);
    if (!st) {
      st = { name, leases: 0, status: 'absent', generation: 0, loaded: Promise.resolve(), dims: 0, cost: 0, samples: [], labels: [] };
      this.states.set(name, st);
      if (this.store.has(name)) this.startLoad(st);
    }
    st.leases++;
    return st;
  }

  private drop(st: ModelState): void {
    if (--st.leases > 0) return;
    st.generation++;
    st.slot?.release();
    st.slot = undefined;
    st.samples = [];
    st.labels = [];
    st.fitting = false;
    st.predict = undefined;
    if (this.states.get(st.name) === st) this.states.delete(st.name);
  }

  private startLoad(st: ModelState): void {
    st.status = 'loading';
    st.fitting = false;
    st.predict = undefined;
    st.tooCostly = false;
    st.reason = undefined;
    const gen = ++st.generation;
    const current = () => this.states.get(st.name) === st && st.generation === gen;
    let file: string;
    try {
      file = this.store.fileOf(st.name);
    } catch (err) {
      this.unusable(st, (err as Error).message);
      return;
    }
    st.loaded = this.loader.load(file, this.maxEvaluationCost).then(
      (r) => {
        if (!current()) return;
        if (r.type === 'foreign') return this.unusable(st, r.reason);
        if (r.type === 'too-costly') {
          st.tooCostly = true;
          st.kind = r.kind as ModelKind;
          return this.unusable(st, costMessage(st.name, r.kind, r.shape, r.cost, this.maxEvaluationCost));
        }
        try {
          st.predict = predictorOfLoaded(r);
        } catch (err) {
          return this.unusable(st, (err as Error).message);
        }
        st.kind = r.kind as ModelKind;
        st.dims = r.dims;
        st.cost = r.cost;
        st.status = 'ready';
        this.st.loaded++;
      },
      (err: Error) => {
        if (current()) this.unusable(st, err.message);
      },
    );
  }

  private unusable(st: ModelState, reason: string): void {
    st.status = 'unusable';
    st.reason = reason;
    st.predict = undefined;
    this.onError?.(st.name, new Error(reason));
  }

  private startTraining(st: ModelState, kind: ModelKind): void {
    st.slot = this.store.reserve(st.name); // 409 when full: nothing changed
    st.status = 'training';
    st.kind = kind;
    st.samples = [];
    st.labels = [];
  }

  /** The store changed a model (upload, delete): the users of that name see the new one (or none). */
  private changed(name: string): void {
    const st = this.states.get(name);
    if (!st) return;
    st.fitting = false;
    st.slot?.release();
    st.slot = undefined;
    st.samples = [];
    st.labels = [];
    if (this.store.has(name)) this.startLoad(st);
    else {
      st.generation++;
      st.status = 'absent';
      st.predict = undefined;
      st.loaded = Promise.resolve();
    }
  }

  private evaluate(name: string, kind: ModelKind, supervised: boolean, args: readonly SelectorValue[]): SelectorValue {
    const st = this.states.get(name);
    if (st === undefined || st.kind !== kind || (st.status !== 'ready' && st.status !== 'training')) return null;
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
    if (st.fitting || (st.samples.length > 0 && st.samples[0]!.length !== nFeatures)) return null;
    st.samples.push(features);
    if (label !== undefined) st.labels.push(label);
    if (st.samples.length >= this.trainingSamples) this.trainNow(st);
    return null;
  }

  /** Trains in the loader's worker; the samples are handed over, the function stays unknown until it is done. */
  private trainNow(st: ModelState): void {
    const name = st.name;
    const kind = st.kind!;
    const samples = st.samples;
    const labels = st.labels;
    const dims = samples[0]!.length;
    st.samples = [];
    st.labels = [];
    st.fitting = true;
    const gen = st.generation;
    const current = () => this.states.get(name) === st && st.generation === gen;
    const meta = { format: 'switchyard-model', kind, dims, trainedAt: new Date().toISOString(), samples: this.trainingSamples };
    this.loader
      .train({ kind, samples, labels, clusters: K_MEANS_CLUSTERS, paths: mlPaths(), meta })
      .then((json) => {
        if (!current()) return; // every user left (its place is back), or the store changed the model meanwhile
        st.fitting = false;
        const doc = JSON.parse(json) as Record<string, unknown>;
        st.predict = load(kind, doc);
        st.dims = dims;
        st.status = 'ready';
        this.st.trained++;
        const slot = st.slot;
        return this.store.writeBuffer(name, Buffer.from(json), false).then(
          () => {
            // saved: the store counts it now; the training place goes back
            slot?.release();
            if (st.slot === slot) st.slot = undefined;
          },
          (err: unknown) => {
            // not saved: it stays in memory while used and keeps its place until dropped
            this.st.saveFailures++;
            if (st.generation === gen) this.onError?.(name, err);
          },
        );
      })
      .catch((err: unknown) => {
        if (!current()) return;
        st.fitting = false;
        this.unusable(st, `training failed: ${(err as Error).message}`);
      });
  }

  /** What the functions know of a model (for diagnostics and tests). */
  describe(name: string): { kind?: ModelKind; status: string; samples: number; leases: number; cost: number; reason?: string } | undefined {
    const st = this.states.get(name);
    return st && { ...(st.kind ? { kind: st.kind } : {}), status: st.status, samples: st.samples.length, leases: st.leases, cost: st.cost, ...(st.reason ? { reason: st.reason } : {}) };
  }
}

/** The 400 for a model whose evaluation would cost more than the budget. */
export function costMessage(name: string, kind: string, shape: string, cost: number, limit: number): string {
  return `Model ${name} is too costly to evaluate: a ${kind} model of ${shape} costs about ${cost} operations per message (limit ${limit}, MessageDaemon.modelStore.maxEvaluationCost)`;
}

function once(f: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    f();
  };
}
