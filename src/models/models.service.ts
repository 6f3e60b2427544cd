import { join } from 'node:path';
import type { Runtime, Service } from '../runtime/runtime.js';
import { ModelFunctions } from './functions.js';
import { ModelStore } from './store.js';

const stores = new WeakMap<Runtime, { store: ModelStore; functions: ModelFunctions }>();

/** The model store of a runtime, or undefined when ML is switched off (`MessageDaemon.modelStore.enabled: false`) or before boot. */
export function modelStoreOf(rt: Runtime): ModelStore | undefined {
  return stores.get(rt)?.store;
}

/** The selector model functions of a runtime (diagnostics, tests). */
export function modelFunctionsOf(rt: Runtime): ModelFunctions | undefined {
  return stores.get(rt)?.functions;
}

/**
 * The ML model store as a service: `{dataDirectory}/models`, opened once per process (temp files of interrupted
 * uploads are removed then), and the model functions of the selector language bound to it (src/models/functions.ts).
 * Registered before the messaging service so that selectors restored at boot find the functions.
 */
export function modelsService(): Service {
  return {
    name: 'models',
    async start(rt: Runtime) {
      const cfg = rt.config.MessageDaemon.modelStore;
      if (!cfg.enabled) return;
      let entry = stores.get(rt);
      if (!entry) {
        const store = new ModelStore({ dir: join(rt.config.MessageDaemon.dataDirectory, 'models'), maxModelSize: cfg.maxModelSize, maxModels: cfg.maxModels });
        const log = rt.log.child({ name: 'models' });
        const functions = new ModelFunctions(store, cfg.trainingSamples, (model, err) => log.warn({ model, err: (err as Error).message }, `model ${model} cannot be used by selectors`));
        entry = { store, functions };
        stores.set(rt, entry);
      }
      entry.functions.register();
    },
    async stop() {},
  };
}
