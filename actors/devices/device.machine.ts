import { assign, fromPromise, setup } from 'xstate';
import { backoffDelay } from '../shared/backoff.js';

/**
 * One hardware device (an I²C sensor) under the `devices` supervisor, `device:<name>` (DESIGN.md, actor tree):
 *
 *   detected → online ⇄ polling                 initialised, then a reading every `interval` ms
 *   detected | polling (failed) → error → (backoff, doubling) → detected      re-initialise: the chip may have lost power
 *   error (offlineAfter consecutive failures) → offline → (retryMax) → detected, or at once when a scan finds it
 *   any state → removed (final) when a scan no longer finds a scanned device
 *
 * The machine holds lifecycle only. Its I/O is supplied by the runtime with `machine.provide`
 * (src/devices/devices.service.ts): `initDevice` (identify, reset, read calibration, set the mode), `readDevice`
 * (one measurement) and the action `publishReading` (the reading into the engine).
 */
export interface DeviceInput {
  name: string;
  /** ms between readings. */
  interval: number;
  retryInitial: number;
  retryMax: number;
  /** Consecutive failed attempts (initialisation or reading) after which the device is offline. */
  offlineAfter: number;
}

export interface DeviceContext extends DeviceInput {
  /** Consecutive failures; reset by a successful reading. */
  attempts: number;
  lastError?: string;
  readings: number;
  /** The next reading is the first after an initialisation (taken at once, not after `interval`). */
  fresh: boolean;
}

export type DeviceEvent =
  /** A scan identified the chip again: an offline or erroring device retries now. */
  | { type: 'device.found' }
  /** A scan no longer finds the device. */
  | { type: 'device.gone' };

export type DeviceReading = Record<string, number | null>;

export const deviceMachine = setup({
  types: {
    context: {} as DeviceContext,
    events: {} as DeviceEvent,
    input: {} as DeviceInput,
  },
  actors: {
    initDevice: fromPromise<void, { name: string }>(async () => {
      throw new Error('initDevice is supplied by the runtime');
    }),
    readDevice: fromPromise<DeviceReading, { name: string }>(async () => {
      throw new Error('readDevice is supplied by the runtime');
    }),
  },
  delays: {
    pollDelay: ({ context }) => (context.fresh ? 0 : context.interval),
    backoff: ({ context }) => backoffDelay(context.attempts, context.retryInitial, context.retryMax),
    offlineRetry: ({ context }) => context.retryMax,
  },
  guards: {
    exhausted: ({ context }) => context.attempts >= context.offlineAfter,
  },
  actions: {
    publishReading: () => {},
    markInitialised: assign({ fresh: true }),
    recordReading: assign(({ context }) => ({ readings: context.readings + 1, attempts: 0, lastError: undefined, fresh: false })),
    recordFailure: assign(({ context, event }) => {
      const error = (event as { error?: unknown }).error;
      return { attempts: context.attempts + 1, lastError: error instanceof Error ? error.message : String(error) };
    }),
  },
}).createMachine({
  id: 'device',
  context: ({ input }) => ({ ...input, attempts: 0, readings: 0, fresh: true }),
  initial: 'detected',
  states: {
    detected: {
      on: { 'device.gone': 'removed' },
      invoke: {
        src: 'initDevice',
        input: ({ context }) => ({ name: context.name }),
        onDone: { target: 'online', actions: 'markInitialised' },
        onError: { target: 'error', actions: 'recordFailure' },
      },
    },
    online: {
      after: { pollDelay: 'polling' },
      on: { 'device.gone': 'removed' },
    },
    polling: {
      on: { 'device.gone': 'removed' },
      invoke: {
        src: 'readDevice',
        input: ({ context }) => ({ name: context.name }),
        onDone: { target: 'online', actions: ['recordReading', 'publishReading'] },
        onError: { target: 'error', actions: 'recordFailure' },
      },
    },
    error: {
      tags: ['degraded'],
      always: { guard: 'exhausted', target: 'offline' },
      after: { backoff: 'detected' },
      on: { 'device.found': 'detected', 'device.gone': 'removed' },
    },
    offline: {
      tags: ['degraded'],
      after: { offlineRetry: 'detected' },
      on: { 'device.found': 'detected', 'device.gone': 'removed' },
    },
    removed: { type: 'final' },
  },
});

/** The state a snapshot shows in DeviceInfoDTO.state. */
export function deviceStateName(value: unknown): 'Detected' | 'Online' | 'Polling' | 'Error' | 'Offline' | 'Removed' {
  switch (value) {
    case 'online':
      return 'Online';
    case 'polling':
      return 'Polling';
    case 'error':
      return 'Error';
    case 'offline':
      return 'Offline';
    case 'removed':
      return 'Removed';
    default:
      return 'Detected';
  }
}
