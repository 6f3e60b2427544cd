import { messagingService } from './messaging.service.js';
import type { Runtime } from './runtime.js';

/** Registers the services booted with the server tree, in start order (stopped in reverse). */
export function registerServices(rt: Runtime): void {
  rt.use(messagingService());
}
