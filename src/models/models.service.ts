import { join } from 'node:path';
import type { Runtime, Service } from '../runtime/runtime.js';
import { ModelStore } from './store.js';

const stores = new WeakMap<Runtime, ModelStore>();

/** The model store of a runtime, or undefined when ML is switched off (`MessageDaemon.modelStore.enabled: false`) or before boot. */
export function modelStoreOf(rt: Runtime): ModelStore | undefined {
  return stores.get(rt);
}

/**
 * The ML model store as a service: `{dataDirectory}/models`, opened once per process (temp files of interrupted
 * uploads are removed then). Registered before the messaging service so selector model functions find it.
 */
export function modelsService(): Service {
  return {
    name: 'models',
    async start(rt: Runtime) {
      const cfg = rt.config.MessageDaemon.modelStore;
      if (!cfg.enabled || stores.has(rt)) return;
      stores.set(rt, new ModelStore({ dir: join(rt.config.MessageDaemon.dataDirectory, 'models'), maxModelSize: cfg.maxModelSize, maxModels: cfg.maxModels }));
    },
    async stop() {},
  };
}
