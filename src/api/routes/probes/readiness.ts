import { endpointsOf } from '../../../endpoints/endpoints.service.js';
import { supervisorStatus } from '../../../runtime/monitor.js';
import { SUPERVISORS, type Runtime } from '../../../runtime/runtime.js';

/** Why the broker is not ready (empty when it is). */
export interface Readiness {
  ready: boolean;
  reasons: string[];
}

/**
 * Readiness, as `GET /readyz` and the `SWITCHYARD_READY` line see it. Not ready while:
 * - the server tree is not running (booting, restarting, stopping);
 * - the store is not open;
 * - a supervisor has failed (its restart budget is spent; read through the monitor's view of the tree);
 * - a configured endpoint that should listen does not (bind failed and retrying, or still binding).
 * - Cluster.enabled and this node is not a cluster member (docs/cluster.md).
 * An endpoint stopped on purpose (PATCH .../interface/{name} `stopped`, or `autoStart: false`) does not count.
 */
export function readiness(rt: Runtime): Readiness {
  const reasons: string[] = [];
  // degraded: a supervisor spent its restart budget and the server gave its subtree up (the rest keeps serving)
  const serving = rt.state === 'running' || rt.state === 'degraded';
  if (!serving) reasons.push(`server is ${rt.state}`);
  if (rt.store.status !== 'open') reasons.push(`store is ${rt.store.status}`);
  if (serving) {
    for (const name of SUPERVISORS) {
      const s = supervisorStatus(name, rt.supervisor(name));
      if (s.status === 'ERROR') reasons.push(`supervisor ${name} failed: ${s.comment}`);
      else if (s.status === 'STOPPED') reasons.push(`supervisor ${name} is not running`);
    }
    if (rt.state === 'degraded' && !reasons.some((r) => r.startsWith('supervisor '))) reasons.push('server is degraded: a supervisor gave up its subtree (see GET /api/v1/server/status)');
    let eps: ReturnType<typeof endpointsOf> | undefined;
    try {
      eps = endpointsOf(rt);
    } catch {
      reasons.push('network endpoints are not running');
    }
    for (const entry of eps?.entries.values() ?? []) {
      const state = eps!.state(entry);
      if (state !== 'Failed' && state !== 'Starting') continue;
      const snap = eps!.actor(entry)?.getSnapshot() as { context?: { lastError?: string; attempts?: number } } | undefined;
      const why = snap?.context?.lastError;
      reasons.push(`endpoint "${entry.name}" (${entry.config.url}) is not listening${state === 'Starting' && !why ? ' yet (binding)' : ''}${why ? `: ${why}` : ''}`);
    }
    // Cluster.enabled: not a member (connecting, isolated from NATS or its quorum, or the nodeId held elsewhere)
    reasons.push(...(rt.service('cluster')?.readinessReasons() ?? []));
  }
  return { ready: reasons.length === 0, reasons };
}

