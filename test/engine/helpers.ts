import type { Message, PushSink, PullSink, Subscription } from '../../src/engine/index.js';

export interface Received {
  sub: Subscription;
  msg: Message;
  destinationName: string;
  text: string;
}

/** A push sink recording what it receives; `credit` limits how many it accepts before saying "no credit". */
export function pushSink(credit = Infinity): PushSink & { got: Received[]; credit: number } {
  const sink = {
    kind: 'push' as const,
    got: [] as Received[],
    credit,
    deliver(sub: Subscription, msg: Message, destinationName: string): boolean {
      if (sink.credit <= 0) return false;
      sink.credit--;
      sink.got.push({ sub, msg, destinationName, text: msg.payload.toString() });
      return true;
    },
  };
  return sink;
}

export function pullSink(): PullSink & { notified: number } {
  const sink = {
    kind: 'pull' as const,
    notified: 0,
    notify(): void {
      sink.notified++;
    },
  };
  return sink;
}

export function texts(r: Received[]): string[] {
  return r.map((x) => x.text);
}
