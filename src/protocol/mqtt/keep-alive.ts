/**
 * One keep-alive sweep for all MQTT connections of the process, instead of a Timeout per connection (128 bytes each
 * plus its entry in Node's timer lists, and a re-arm on every expiry). Every `SWEEP_MS` the sweep walks the
 * connection registry of each broker (the map it keeps anyway, so a connection costs nothing extra here) and each
 * connection compares its own deadline with the time: CONNECT not received within the endpoint's connect timeout,
 * nothing read within 1.5 × keep alive [MQTT-3.1.2-24] (MQTT 5 [MQTT-3.1.2-22]), or 3.1.1 keep alive 0 idle past
 * maxIdleKeepAliveZero. A connection is never closed before its deadline and at most `SWEEP_MS` after it
 * (docs/messaging.md). The interval runs only while some broker has connections and never keeps the process alive.
 */

/** Granularity of the sweep (ms): how late past its deadline a silent connection may be closed. */
export const SWEEP_MS = 250;

/** A connection as the sweep sees it: checks its deadlines against `now` (Date.now()) and closes itself when due. */
export interface SweptConnection {
  sweep(now: number): void;
}

/** The registries swept (each broker's connection map; dropped from here while empty). */
const registries = new Set<ReadonlyMap<number, SweptConnection>>();
let interval: NodeJS.Timeout | undefined;

/** Sweep `connections` (a broker's registry) from now on; cheap to call for every new connection. */
export function watchConnections(connections: ReadonlyMap<number, SweptConnection>): void {
  registries.add(connections);
  if (interval === undefined) {
    interval = setInterval(sweepAll, SWEEP_MS);
    interval.unref();
  }
}

/** The time of the sweep under way (read by `sweepOne`). */
let sweepNow = 0;

function sweepOne(c: SweptConnection): void {
  c.sweep(sweepNow);
}

function sweepAll(): void {
  sweepNow = Date.now();
  for (const connections of registries) {
    if (connections.size === 0) {
      registries.delete(connections); // watched again by its next connection
      continue;
    }
    // forEach, not for..of: no iterator result object per connection and sweep (garbage every SWEEP_MS, thousands
    // of them). A connection closed by its sweep leaves the map during the walk, which Map iteration allows.
    connections.forEach(sweepOne);
  }
  if (registries.size === 0 && interval !== undefined) {
    clearInterval(interval);
    interval = undefined;
  }
}
