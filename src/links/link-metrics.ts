import { Counter, Gauge, type Registry } from 'prom-client';
import type { Runtime } from '../runtime/runtime.js';
import type { LinkEntry } from './link-manager.js';

const CONNECTION_STATES = ['Disconnected', 'Connecting', 'Connected', 'Establishing', 'Established', 'Delayed', 'Shutdown'] as const;

/**
 * Per-link series on `/metrics`, labelled `{link}` only: the label set is bounded by the configured link names
 * (NetworkConnectionManager.data), never by topics or peers.
 */
export function registerLinkMetrics(register: Registry, rt: Runtime): void {
  const svc = () => rt.service('integrations');
  const rows = (): LinkEntry[] => svc()?.entries() ?? [];
  const series = (kind: 'counter' | 'gauge', name: string, help: string, value: (e: LinkEntry) => number) => {
    const common = { name: `switchyard_link_${name}`, help, labelNames: ['link'], registers: [register] };
    if (kind === 'counter') {
      new Counter({
        ...common,
        collect() {
          this.reset();
          for (const e of rows()) this.inc({ link: e.name }, Math.max(0, value(e)));
        },
      });
    } else {
      new Gauge({
        ...common,
        collect() {
          this.reset();
          for (const e of rows()) this.set({ link: e.name }, value(e));
        },
      });
    }
  };
  series('gauge', 'up', '1 while the link is Established, else 0', (e) => (svc()?.connectionState(e) === 'Established' ? 1 : 0));
  series('gauge', 'started', '1 while the link is Started (run state), 0 when Stopped or Paused', (e) => (svc()?.runState(e) === 'Started' ? 1 : 0));
  series('gauge', 'paused', '1 while the link is Paused', (e) => (svc()?.runState(e) === 'Paused' ? 1 : 0));
  series('gauge', 'state', `Connection state: ${CONNECTION_STATES.map((s, i) => `${i} ${s}`).join(', ')}`, (e) => CONNECTION_STATES.indexOf(svc()?.connectionState(e) ?? 'Shutdown'));
  series('gauge', 'stalled', '1 when the link has been Started and not Established for longer than its backoff cap (/health Warning)', (e) => (svc()?.stalled(e) ? 1 : 0));
  series('gauge', 'outbox_messages', 'Messages waiting in the persistent outbox of the link (push)', (e) => svc()?.manager?.outboxDepth(e) ?? 0);
  series('counter', 'messages_sent_total', 'Messages the remote side took (pushed)', (e) => e.counters.messagesSent);
  series('counter', 'messages_received_total', 'Messages received and stored locally (pulled)', (e) => e.counters.messagesReceived);
  series('counter', 'bytes_sent_total', 'Payload bytes pushed', (e) => e.counters.bytesSent);
  series('counter', 'bytes_received_total', 'Payload bytes pulled', (e) => e.counters.bytesReceived);
  series('counter', 'errors_total', 'Connection failures, send failures and messages not stored', (e) => e.counters.errors);
  series('counter', 'loops_dropped_total', 'Received messages that originated on this broker (dropped)', (e) => e.counters.loopsDropped);
  series('counter', 'refused_total', 'Pushed messages the remote side refused for good (dropped)', (e) => e.counters.refused);
  series('counter', 'rejected_total', 'Received messages this broker refused: $SYS topic, payload schema (dropped)', (e) => e.counters.rejected);
  series('counter', 'qos0_dropped_total', 'QoS 0 messages dropped unread while this broker was behind (NATS links with qos0Subjects: the cluster)', (e) => e.counters.qos0Dropped);
  series('counter', 'connects_total', 'Successful connections of the link', (e) => e.counters.connects);
}
