import { ForbiddenError, ValidationError } from '../errors.js';
import { compileSelector, type CompiledSelector } from '../engine/selector/selector.js';
import type { Runtime } from '../runtime/runtime.js';
import type { Principal } from '../security/types.js';
import { modelUsesOf } from './functions.js';
import { modelFunctionsOf } from './models.service.js';

/** How long a request waits for the models its selector names to load (in the worker) before it goes on without. */
const LOAD_WAIT_MS = 10_000;

/**
 * The access check for a selector that calls model functions, made where a caller hands in a selector (REST list
 * filters and subscriptions through the `filter` hook of src/api/routes/models/model-access.ts, SSE streams):
 *
 * - every model it names needs `use_model` on `Model <name>` (403);
 * - a model that is not in the store would be trained online by this selector: that needs `train_model` on it
 *   (403: nobody without it can create a model under a name first, nor feed samples to one being trained), and
 *   takes one of the `maxModels` places at once (409 when the store is full);
 * - the models are loaded (in the loader's worker) before the request goes on, and a model too costly to
 *   evaluate (`maxEvaluationCost`) is refused (400).
 *
 * Returns the release of what the check holds for the request (call it when the request ends: a subscription made
 * meanwhile holds the models on its own). A selector without model functions costs nothing here.
 */
export async function checkSelectorModels(rt: Runtime, principal: Principal, selector: string | CompiledSelector | undefined): Promise<() => void> {
  const none = () => {};
  if (selector === undefined) return none;
  if (typeof selector === 'string' && !selector.includes('(')) return none; // no call at all: nothing to check
  const fns = modelFunctionsOf(rt);
  if (!fns) return none;
  let compiled: CompiledSelector;
  try {
    compiled = typeof selector === 'string' ? compileSelector(selector) : selector;
  } catch {
    return none; // the route answers the selector's own 400
  }
  const uses = modelUsesOf(compiled);
  if (uses.length === 0) return none;
  const sec = rt.security;
  let train = false;
  for (const u of uses) {
    if (!sec.isAllowed(principal, 'use_model', 'Model', u.name)) deny(rt, principal, 'use_model', u.name, `Access denied: ${principal.username} lacks use_model on Model ${u.name} (needed to call ${u.fn}('${u.name}', ...) in a selector)`);
    if (u.fn !== 'model_exists' && !fns.available(u.name)) {
      if (!sec.isAllowed(principal, 'train_model', 'Model', u.name)) {
        deny(rt, principal, 'train_model', u.name, `Access denied: model ${u.name} is not in the store, so this selector would train it online, which needs train_model on Model ${u.name} (${principal.username} lacks it)`);
      }
      train = true;
    }
  }
  const lease = fns.use(compiled, { train });
  try {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([lease.ready, new Promise<void>((r) => (timer = setTimeout(r, LOAD_WAIT_MS)))]);
    clearTimeout(timer);
    const refused = lease.refusal();
    if (refused) throw new ValidationError(refused);
  } catch (err) {
    lease.release();
    throw err;
  }
  return lease.release;
}

function deny(rt: Runtime, principal: Principal, permission: string, model: string, message: string): never {
  rt.security.audit?.denied({ username: principal.username, permission, resourceType: 'Model', resourceKey: model }, message);
  throw new ForbiddenError(message);
}
