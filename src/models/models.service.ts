import { join } from 'node:path';
import type { Runtime, Service } from '../runtime/runtime.js';
import { ModelFunctions } from './functions.js';
import { ModelStore } from './store.js';

/** The models service as other code finds it: `rt.service('models').entry` (typed registry entry, no WeakMap). */
export interface ModelsService extends Service {
  /** Made at the first boot (when the model store is enabled) and kept across restarts of the server tree. */
  entry: { store: ModelStore; functions: ModelFunctions } | undefined;
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    models: ModelsService;
  }
}

/** The model store of a runtime, or undefined when ML is switched off (`MessageDaemon.modelStore.enabled: false`) or before boot. */
export function modelStoreOf(rt: Runtime): ModelStore | undefined {
  return rt.service('models')?.entry?.store;
}

/** The selector model functions of a runtime (diagnostics, tests). */
export function modelFunctionsOf(rt: Runtime): ModelFunctions | undefined {
  return rt.service('models')?.entry?.functions;
}

/**
 * The ML model store as a service: `{dataDirectory}/models`, opened once per process (temp files of interrupted
 * uploads are removed then), and the model functions of the selector language bound to it (src/models/functions.ts).
 * Registered before the messaging service so that selectors restored at boot find the functions.
 */
export function modelsService(): ModelsService {
  const service: ModelsService = {
    name: 'models',
    entry: undefined,
    async start(rt: Runtime) {
      const cfg = rt.config.MessageDaemon.modelStore;
      if (!cfg.enabled) return;
      let entry = service.entry;
      if (!entry) {
        const store = new ModelStore({ dir: join(rt.config.MessageDaemon.dataDirectory, 'models'), maxModelSize: cfg.maxModelSize, maxModels: cfg.maxModels });
        const log = rt.log.child({ name: 'models' });
        const functions = new ModelFunctions(store, {
          trainingSamples: cfg.trainingSamples,
          maxEvaluationCost: cfg.maxEvaluationCost,
          onError: (model, err) => log.warn({ model, err: (err as Error).message }, `model ${model} cannot be used by selectors`),
        });
        entry = { store, functions };
        service.entry = entry;
      }
      entry.functions.register();
    },
    async stop() {
      // the engine and its subscriptions are gone: nothing holds a model any more
      service.entry?.functions.clear();
      await service.entry?.functions.loader.close();
    },
  };
  return service;
}
