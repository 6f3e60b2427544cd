import type { Runtime } from './runtime.js';

/** Registers the services booted with the server tree, in start order. */
export function registerServices(rt: Runtime): void {
  void rt;
}
