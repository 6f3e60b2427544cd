import type { Runtime } from '../../../runtime/runtime.js';

/** ServerStatisticsDTO from the engine's counters and the network counters. */
export function serverStats(rt: Runtime) {
  const e = rt.engineStats();
  const n = rt.network;
  const metrics: Record<string, { name: string; unitName: string; timeSpan: number; current: number; stats: Record<string, number> }> = {};
  const add = (name: string, unitName: string, current: number) => {
    metrics[name] = { name, unitName, timeSpan: 0, current, stats: {} };
  };
  add('Published Messages', 'msg/s', e.publishedPerSecond);
  add('Delivered Messages', 'msg/s', e.deliveredPerSecond);
  add('Connections', 'connections', n.currentConnections);
  return {
    packetsSent: n.packetsSent,
    packetsReceived: n.packetsReceived,
    totalReadBytes: n.totalReadBytes,
    totalWriteBytes: n.totalWriteBytes,
    totalConnections: n.totalConnections,
    totalDisconnections: n.totalDisconnections,
    totalNoInterestMessages: e.totalNoInterestMessages,
    totalSubscribedMessages: e.totalSubscribedMessages,
    totalPublishedMessages: e.totalPublishedMessages,
    totalRetrievedMessages: e.totalRetrievedMessages,
    totalExpiredMessages: e.totalExpiredMessages,
    totalDeliveredMessages: e.totalDeliveredMessages,
    publishedPerSecond: e.publishedPerSecond,
    subscribedPerSecond: e.subscribedPerSecond,
    noInterestPerSecond: e.noInterestPerSecond,
    deliveredPerSecond: e.deliveredPerSecond,
    retrievedPerSecond: e.retrievedPerSecond,
    stats: JSON.stringify(metrics),
  };
}
