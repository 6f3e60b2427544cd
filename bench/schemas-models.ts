/**
 * Payload schema checks and selector model functions, per message.
 *
 * 1. Publishes per second into the engine (in memory, one subscriber-less topic, the path REST and MQTT publishes
 *    take: `engine.checkSchema` then `engine.publish`) to a destination bound to a JSON Schema and to one without a
 *    schema, in alternating rounds; the difference is the cost of the check.
 * 2. Selector evaluations per second for a plain comparison and for each model function on a trained model
 *    (`isolation_forest('m', t, p) > 0.63` and the others), over the same message view.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine } from '../src/engine/engine.js';
import { compileSelector } from '../src/engine/selector/selector.js';
import { ModelFunctions } from '../src/models/functions.js';
import { ModelStore } from '../src/models/store.js';
import { SchemaRegistry } from '../src/schemas/registry.js';
import { Store } from '../src/store/store.js';
import { fmt, isMain, printReport, type BenchReport } from './report.js';

const N = Number(process.env.BENCH_SCHEMA_MESSAGES ?? 200_000);
const ROUNDS = 3;

function rate(n: number, fn: (i: number) => void): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) fn(i);
  return n / (Number(process.hrtime.bigint() - t0) / 1e9);
}

export async function run(): Promise<BenchReport> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-bench-schemas-'));
  const store = await Store.open(dir);
  const rows: Array<[string, string]> = [];
  try {
    // ---- 1. schema check on publish
    const engine = new Engine();
    const registry = new SchemaRegistry({ store, enforcement: 'reject' });
    registry.attach(engine);
    await registry.add(
      JSON.stringify({
        uniqueId: 'reading',
        format: 'json',
        schema: {
          type: 'object',
          properties: { temperature: { type: 'number', minimum: -50, maximum: 150 }, unit: { enum: ['C', 'F'] }, sensor: { type: 'string', maxLength: 64 } },
          required: ['temperature', 'unit'],
          additionalProperties: false,
        },
      }),
      'bench/checked',
    );
    const payload = Buffer.from('{"temperature":21.5,"unit":"C","sensor":"boiler-7"}');
    const publishTo = (dest: string) => (i: number) => {
      if (engine.checkSchema(dest, payload) !== undefined) throw new Error(`refused at ${i}`);
      void engine.publish(dest, { payload });
    };
    publishTo('bench/checked')(0);
    publishTo('bench/free')(0);
    const checked: number[] = [];
    const free: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      checked.push(rate(N, publishTo('bench/checked')));
      free.push(rate(N, publishTo('bench/free')));
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const c = med(checked);
    const f = med(free);
    rows.push(['publishes/s, no schema (engine, in memory)', fmt(f)]);
    rows.push(['publishes/s, JSON Schema destination', fmt(c)]);
    rows.push(['JSON Schema check per message', `${fmt(1e9 / c - 1e9 / f)} ns`]);
    const bad = Buffer.from('{"temperature":"hot","unit":"C"}');
    const refused = rate(N, () => engine.checkSchema('bench/checked', bad));
    rows.push(['refused payloads/s (first error named)', fmt(refused)]);

    // ---- 2. selector model functions
    const models = new ModelStore({ dir: join(dir, 'models'), maxModelSize: 1 << 26, maxModels: 100 });
    const fns = new ModelFunctions(models, 256);
    fns.register();
    const rnd = () => Math.random();
    const views = Array.from({ length: 1024 }, () => ({ temperature: 70 + 4 * (rnd() - 0.5), pressure: 3 + 0.2 * (rnd() - 0.5), label: rnd() < 0.5 ? 'a' : 'b' }));
    const selectors: Array<[string, string]> = [
      ['plain comparison', 'temperature > 80 AND pressure < 2'],
      ['isolation_forest', "isolation_forest('if', temperature, pressure) > 0.63"],
      ['k_means', "k_means('km', temperature, pressure) = 1"],
      ['linear_regression', "linear_regression('lr', temperature, pressure) > 3"],
      ['decision_tree', "decision_tree('dt', temperature, pressure, label) = 'a'"],
      ['naive_bayes', "naive_bayes('nb', temperature, pressure, label) = 'a'"],
      ['pca', "pca('pc', temperature, pressure) > 0"],
      ['model_exists', "model_exists('if')"],
    ];
    const leases = [];
    for (const [, text] of selectors) {
      const sel = compileSelector(text);
      leases.push(fns.use(sel, { train: true })); // held as a subscription of a train_model holder holds it
      for (let i = 0; i < 300; i++) sel.matches(views[i % views.length]!); // trains the model (256 samples)
    }
    for (const [name, text] of selectors) {
      const sel = compileSelector(text);
      const n = name === 'plain comparison' || name === 'model_exists' ? N : N / 4;
      const r = med([0, 1, 2].map(() => rate(n, (i) => sel.matches(views[i & 1023]!))));
      rows.push([`${name}: evaluations/s`, `${fmt(r)} (${fmt(1e9 / r)} ns each)`]);
    }
    for (const l of leases) l.release();
    await fns.loader.close();
  } finally {
    await store.close();
    await new Promise((r) => setTimeout(r, 200)); // trained models are saved in the background
    await rm(dir, { recursive: true, force: true, maxRetries: 5 });
  }
  return { title: 'Payload schemas and selector model functions (per message, one core)', rows, target: 'none set' };
}

if (isMain(import.meta.url)) printReport(await run());
