/** The data of the normative-statement suite: cases (one per statement and protocol version) and deviations. */
import type { Ctx, V } from '../harness.js';

export const BROKERS = ['switchyard', 'mosquitto'] as const;
export type BrokerName = (typeof BROKERS)[number];

/** A broker's documented deviation from a statement: why, and (optionally) a check of what it does instead. */
export interface Deviation {
  why: string;
  observe?: (t: Ctx) => Promise<void>;
}

export interface Case {
  /** the statement id, e.g. MQTT-3.1.2-24 */
  id: string;
  /** the protocol version whose statement it is: 4 = MQTT 3.1.1, 5 = MQTT 5.0 */
  v: V;
  /** what the test checks, in a line */
  title: string;
  /** further statements of the same version this test also proves */
  covers?: string[];
  run(t: Ctx): Promise<void>;
  deviation?: Partial<Record<BrokerName, Deviation>>;
}

/** The same check for a statement of 3.1.1 and one of 5.0 (ids may differ): one case each. */
export function both(ids: { 4?: string; 5?: string }, title: string, run: (t: Ctx, v: V) => Promise<void>, more: { 4?: Partial<Case>; 5?: Partial<Case> } = {}): Case[] {
  const out: Case[] = [];
  for (const v of [4, 5] as const) {
    const id = ids[v];
    if (id !== undefined) out.push({ id, v, title, run: (t) => run(t, v), ...(more[v] ?? {}) });
  }
  return out;
}
