import { LogLimiter } from '../log-limit.js';
import type { MessagingService } from '../messaging/messaging.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import { SchemaRegistry, type Enforcement } from './registry.js';

/** The schemas service as other code finds it: `rt.service('schemas').registry` (typed registry entry, no WeakMap). */
export interface SchemasService extends Service {
  /** Made at the first boot and kept across restarts of the server tree. */
  registry: SchemaRegistry | undefined;
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    schemas: SchemasService;
  }
}

/** The schema registry of a runtime (made by `schemasService`); undefined before its first boot. */
export function schemaRegistryOf(rt: Runtime): SchemaRegistry | undefined {
  return rt.service('schemas')?.registry;
}

/** What the schemas service is given (src/compose.ts): the engine it attaches to at every boot. */
export interface SchemasDeps {
  messaging: MessagingService;
}

/**
 * The schema registry as a service: loads the stored schemas once (they survive restarts in the store's `schemas`
 * sublevel), attaches to the engine at every boot (binds destinations, publishes `$schema/<destination>` retained),
 * follows new destinations, and detaches on stop. Started after (stopped before) the messaging service.
 */
export function schemasService(deps: SchemasDeps): SchemasService {
  const violations = new LogLimiter();
  let onCreated: ((name: string) => void) | undefined;
  const service: SchemasService = {
    name: 'schemas',
    dependsOn: Object.keys(deps),
    registry: undefined,
    async start(rt: Runtime) {
      let reg = service.registry;
      if (!reg) {
        const dm = rt.config.DestinationManager;
        const perDest = new Map<string, Enforcement>();
        for (const d of dm.data) if (d.schemaEnforcement) perDest.set(d.name, d.schemaEnforcement);
        const log = rt.log.child({ name: 'schemas' });
        reg = new SchemaRegistry({
          store: rt.store,
          enforcement: dm.schemaEnforcement,
          destinationEnforcement: perDest,
          // one line per schema and destination per 10 s, the others counted in a summary line (src/log-limit.ts)
          warn: ({ destination, schemaId, problem }) =>
            violations.warn(log, 'schema-violation', `${schemaId}\u0000${destination}`, { destination, schemaId, problem }, `payload does not match schema ${schemaId} of ${destination}: ${problem}`),
        });
        await reg.load((id, err) => log.error({ err, schemaId: id }, 'stored schema does not compile any more; skipped'));
        service.registry = reg;
        log.info({ schemas: reg.size }, 'schemas loaded');
      }
      reg.attach(deps.messaging.requireEngine());
      const r = reg;
      onCreated = (name: string) => r.destinationCreated(name);
      rt.on('destination.created', onCreated);
    },
    async stop(rt: Runtime) {
      if (onCreated) rt.off('destination.created', onCreated);
      onCreated = undefined;
      service.registry?.attach(undefined);
    },
  };
  return service;
}
