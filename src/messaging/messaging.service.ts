import { Engine, levelEngineStore, type DestinationType, type DurableChange, type Subscription } from '../engine/index.js';
import { ServiceUnavailableError } from '../errors.js';
import { RECLAIM_MIN_REMOVED, reclaimMemory } from '../runtime/reclaim.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { SecurityManagerService } from '../security/service.js';
import type { EngineStore } from '../engine/engine-store.js';

declare module '../runtime/runtime.js' {
  /** `rt.engine` is this engine: the kernel declares only what it calls (isClosed). */
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface RuntimeEngine extends Engine {}
}

/** The engine's notices on the runtime's event bus (emitted below). */
declare module '../runtime/events.js' {
  interface RuntimeEvents {
    'destination.created': [name: string, type: DestinationType];
    'destination.deleted': [name: string, type: DestinationType];
    'destination.highWater': [name: string, depth: number];
    'destination.lowWater': [name: string, depth: number];
    'subscription.changed': [sub: Subscription, change: DurableChange];
    /** A durable subscription reached its cap (full) or has room again (edges only). */
    'subscription.full': [sub: Subscription, full: boolean];
    'store.failed': [err: unknown];
  }
}

/**
 * Boots the messaging engine with the server tree: opens it over the store's `messages` sublevel, declares the
 * configured destinations, recovers persisted queues, retained and durable messages, and schedules the expiry
 * sweep and the idle-topic sweep (DestinationManager.idleTimeout). On stop (or restart) it flushes pending group
 * commits.
 *
 * The services that need the engine take this service as a typed dependency (src/compose.ts) and read the engine
 * in their own start(): it is the same engine until they are stopped, since they start after this service and stop
 * before it. (`rt.engine` is the same engine, for the REST routes.)
 */
export interface MessagingService extends Service {
  readonly name: 'messaging';
  /** The engine between this service's start and stop, else undefined. */
  readonly engine: Engine | undefined;
  /** The engine, or ServiceUnavailableError (503) while the server is not running. */
  requireEngine(): Engine;
}

/** What the messaging service is given (src/compose.ts): security, which authorises deliveries per subscriber. */
export interface MessagingDeps {
  security: SecurityManagerService;
}

export function messagingService(deps: MessagingDeps, opts: { wrapStore?: (store: EngineStore, rt: Runtime) => EngineStore } = {}): MessagingService {
  let current: Engine | undefined;
  let sweep: NodeJS.Timeout | undefined;
  let idle: NodeJS.Timeout | undefined;
  let reclaimTimer: NodeJS.Timeout | undefined;
  return {
    name: 'messaging',
    get engine() {
      return current;
    },
    requireEngine() {
      if (current === undefined || current.isClosed) throw new ServiceUnavailableError('The messaging engine is not running (the server is starting, restarting or stopping); try again');
      return current;
    },
    dependsOn: Object.keys(deps),
    async start(rt: Runtime) {
      const dm = rt.config.DestinationManager;
      const local = levelEngineStore(rt.store.sublevel('messages') as never);
      const engine = new Engine({
        store: opts.wrapStore ? opts.wrapStore(local, rt) : local, // the cluster's session plane mirrors cluster sessions' keys
        queuePrefixes: dm.queuePrefixes,
        defaultMaxBytes: dm.maxQueuedBytes,
        events: {
          onDestinationCreated: (name, type) => {
            rt.updates.destinationUpdate++;
            rt.emit('destination.created', name, type);
          },
          onDestinationDeleted: (name, type) => {
            rt.updates.destinationUpdate++;
            rt.emit('destination.deleted', name, type);
          },
          onQueueHighWater: (name, depth) => {
            rt.log.warn({ destination: name, depth }, 'queue reached its high-water mark');
            rt.emit('destination.highWater', name, depth);
          },
          onQueueLowWater: (name, depth) => rt.emit('destination.lowWater', name, depth),
          onSlowConsumer: (sessionId, filter, depth) => rt.log.warn({ sessionId, filter, depth }, 'slow consumer: subscription is dropping messages'),
          onDurableSubscription: (sub, change) => rt.emit('subscription.changed', sub, change),
          onSubscriptionFull: (sub, full) => rt.emit('subscription.full', sub, full),
          onStoreFailure: (err) => {
            rt.log.error({ err }, 'store write failed');
            rt.emit('store.failed', err);
          },
        },
      });
      for (const d of dm.data) {
        if (!engine.hasDestination(d.name)) engine.createDestination(d.name, d.type);
      }
      const recovered = await engine.recover();
      rt.log.info(recovered, 'messages recovered from the store');
      current = rt.engine = engine;
      rt.engineView = {
        totals: () => engine.stats(),
        destinationCount: () => engine.destinationCount,
        messagesPassed: () => engine.messagesPassed,
      };
      sweep = setInterval(() => engine.sweepExpired(), dm.expirySweepInterval);
      sweep.unref();
      // idle topics go (engine entry and actor) after DestinationManager.idleTimeout; checked a few times per timeout
      if (dm.idleTimeout > 0) {
        idle = setInterval(() => {
          const removed = engine.sweepIdle(dm.idleTimeout, rt.now()).length;
          if (removed) rt.log.debug({ removed }, 'idle topics removed');
          // many at once: give their memory back now (an idle process would not GC); see reclaim.ts. Only the count
          // goes into the timer: a closure over the array of removed names kept them all alive through this very
          // GC (1 000 000 topics: about 48 MiB of heap left after idle, bench/idle-destinations)
          if (removed >= RECLAIM_MIN_REMOVED && reclaimTimer === undefined) {
            reclaimTimer = setTimeout(() => {
              reclaimTimer = undefined;
              if (reclaimMemory()) rt.log.debug({ removed }, 'memory reclaimed after the idle-topic sweep');
            }, 1000);
            reclaimTimer.unref();
          }
        }, Math.max(250, Math.min(60000, Math.floor(dm.idleTimeout / 4))));
        idle.unref();
      }
    },
    // every service's start() has run: the MQTT and REST sessions made their durable subscriptions again
    running(rt: Runtime) {
      const forgotten = current?.forgetUnclaimedPaused() ?? 0;
      if (forgotten) rt.log.info({ subscriptions: forgotten }, 'paused flags of subscriptions no session restored deleted');
    },
    async stop(rt: Runtime) {
      if (sweep) clearInterval(sweep);
      if (idle) clearInterval(idle);
      if (reclaimTimer) clearTimeout(reclaimTimer);
      sweep = idle = reclaimTimer = undefined;
      const engine = rt.engine;
      rt.engineView = undefined;
      current = rt.engine = undefined;
      await engine?.close();
    },
  };
}
