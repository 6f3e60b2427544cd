// Overview: health, live rates (polled once a second), subsystems and top destinations.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { ErrorBox, Loaded, Page, stateClass } from '../lib/components.js';
import { fmtCount, fmtRate } from '../lib/format.js';

export const page = { path: '/overview', label: 'Overview', group: 'Messaging', order: 10, view: Overview };

function Overview() {
  const [health] = useApi('/health', 5000);
  const [status] = useApi('/api/v1/server/status', 5000);
  const [stats] = useApi('/api/v1/server/details/stats', 1000); // live rates: polled once a second
  const [top] = useApi('/api/v1/server/destination?size=5&sortBy=Published', 5000);
  let connections;
  try {
    connections = JSON.parse(stats.data?.stats ?? '{}').Connections?.current;
  } catch {
    connections = undefined;
  }
  const s = stats.data;
  return html`<${Page} title="Overview" curl="/api/v1/server/details/stats">
    <p>Health: <strong class=${stateClass(health.data)} data-testid="health">${health.data ?? (health.error ? 'unknown' : '…')}</strong></p>
    <${ErrorBox} error=${health.error} />
    <h2>Live rates</h2>
    <${ErrorBox} error=${stats.error} />
    <dl class="rates" aria-live="off">
      <div><dt>Published</dt><dd data-testid="rate-published">${s ? fmtRate(s.publishedPerSecond, 'msg') : '…'}</dd></div>
      <div><dt>Delivered</dt><dd data-testid="rate-delivered">${s ? fmtRate(s.deliveredPerSecond, 'msg') : '…'}</dd></div>
      <div><dt>Connections</dt><dd data-testid="connections">${s ? fmtCount(connections ?? s.totalConnections - s.totalDisconnections, 'open') : '…'}</dd></div>
      <div><dt>Messages published</dt><dd>${s ? fmtCount(s.totalPublishedMessages, 'msg') : '…'}</dd></div>
    </dl>
    <div class="columns"><section aria-labelledby="h-subsystems">
    <h2 id="h-subsystems">Subsystems</h2>
    <${Loaded} state=${status}>${(rows) => html`<div class="wrap"><table>
      <caption>Status of each subsystem, refreshed every 5 s</caption>
      <thead><tr><th scope="col">Subsystem</th><th scope="col">Status</th><th scope="col">Detail</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr><th scope="row">${r.name}</th><td class=${stateClass(r.status)}>${r.status}</td><td>${r.comment}</td></tr>`)}</tbody>
    </table></div>`}<//>
    </section><section aria-labelledby="h-top">
    <h2 id="h-top">Top destinations</h2>
    <${Loaded} state=${top}>${(rows) =>
      rows.length === 0
        ? html`<p class="notice">No destination has subscribers yet.</p>`
        : html`<div class="wrap"><table>
      <thead><tr><th scope="col">Destination</th><th scope="col" class="num">Published</th><th scope="col" class="num">Delivered</th><th scope="col" class="num">Stored</th></tr></thead>
      <tbody>${rows.map((d) => html`<tr><th scope="row">${d.name}</th><td class="num">${fmtCount(d.publishedMessages, 'msg')}</td><td class="num">${fmtCount(d.deliveredMessages, 'msg')}</td><td class="num">${fmtCount(d.storedMessages, 'msg')}</td></tr>`)}</tbody>
    </table></div>`}<//>
    </section></div>
  <//>`;
}
