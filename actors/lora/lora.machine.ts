import { assign, fromCallback, fromPromise, setup } from 'xstate';
import { backoffDelay } from '../shared/backoff.js';

/**
 * One LoRa radio (a modem on a serial port), `lora:<name>` under the `lora` supervisor:
 *
 *   opening → online ⇄ offline            offline: the modem was lost; it is reopened after a backoff
 *   opening (open failed) → failed → opening after a backoff           (failed and offline are tagged `degraded`)
 *
 * `failed` means the radio has not come up since the actor started (wrong port, no modem, modem refused the
 * settings); `offline` means it was online and the modem went away (port closed, modem stopped answering). Both retry
 * with a backoff doubling from `retryInitial` to `retryMax`; a success resets it.
 *
 * The machine holds lifecycle only. The runtime supplies the I/O with `machine.provide`:
 * - `openModem` (promise): opens the port and configures the modem, resolves with a handle;
 * - `modemSession` (callback): lives exactly as long as `online`; reports `modem.lost` when the handle does, and
 *   closes the handle when the state is left (loss, or the actor itself being stopped).
 * No packet is an event here.
 */
export interface ModemLike {
  /** What the modem said it is (`sys get ver`). */
  readonly version: string;
  onLost(cb: (reason: string) => void): void;
  close(): Promise<void>;
}

export interface LoRaInput {
  name: string;
  retryInitial: number;
  retryMax: number;
}

export interface LoRaContext extends LoRaInput {
  modem?: ModemLike;
  attempts: number;
  lastError?: string;
}

export type LoRaEvent = { type: 'modem.lost'; reason: string };

export const loraMachine = setup({
  types: {
    context: {} as LoRaContext,
    events: {} as LoRaEvent,
    input: {} as LoRaInput,
  },
  actors: {
    openModem: fromPromise<ModemLike, { name: string }>(async () => {
      throw new Error('openModem is supplied by the runtime');
    }),
    modemSession: fromCallback<LoRaEvent, { modem: ModemLike }>(({ input, sendBack }) => {
      input.modem.onLost((reason) => sendBack({ type: 'modem.lost', reason }));
      return () => void input.modem.close();
    }),
  },
  delays: {
    backoff: ({ context }) => backoffDelay(context.attempts, context.retryInitial, context.retryMax),
  },
  actions: {
    keepModem: assign(({ event }) => ({ modem: (event as unknown as { output: ModemLike }).output, attempts: 0, lastError: undefined })),
    recordOpenError: assign(({ context, event }) => {
      const err = (event as { error?: unknown }).error;
      return { attempts: context.attempts + 1, modem: undefined, lastError: err instanceof Error ? err.message : String(err) };
    }),
    recordLoss: assign(({ context, event }) => ({
      attempts: context.attempts + 1,
      modem: undefined,
      lastError: event.type === 'modem.lost' ? event.reason : context.lastError,
    })),
  },
}).createMachine({
  id: 'lora',
  context: ({ input }) => ({ ...input, attempts: 0 }),
  initial: 'opening',
  states: {
    opening: {
      invoke: {
        src: 'openModem',
        input: ({ context }) => ({ name: context.name }),
        onDone: { target: 'online', actions: 'keepModem' },
        onError: { target: 'failed', actions: 'recordOpenError' },
      },
    },
    online: {
      invoke: { id: 'modemSession', src: 'modemSession', input: ({ context }) => ({ modem: context.modem! }) },
      on: { 'modem.lost': { target: 'offline', actions: 'recordLoss' } },
    },
    offline: {
      tags: ['degraded'],
      initial: 'waiting',
      states: {
        waiting: { after: { backoff: 'reopening' } },
        reopening: {
          invoke: {
            src: 'openModem',
            input: ({ context }) => ({ name: context.name }),
            onDone: { target: '#lora.online', actions: 'keepModem' },
            onError: { target: 'waiting', actions: 'recordOpenError' },
          },
        },
      },
    },
    failed: {
      tags: ['degraded'],
      after: { backoff: 'opening' },
    },
  },
});

/** The state an operator sees: Opening, Online, Offline or Failed. */
export function loraStateName(value: unknown): 'Opening' | 'Online' | 'Offline' | 'Failed' {
  if (value && typeof value === 'object' && 'offline' in value) return 'Offline';
  switch (value) {
    case 'online':
      return 'Online';
    case 'failed':
      return 'Failed';
    case 'offline':
      return 'Offline';
    default:
      return 'Opening';
  }
}
