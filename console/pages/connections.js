// Connections: filtered by client id, user, endpoint or protocol; refreshed every 5 s.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { fmtBytes, fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';

export const page = { path: '/connections', label: 'Connections', group: 'Messaging', order: 30, view: Connections };

function Connections({ params }) {
  const [list] = useApi('/api/v1/server/connections', 5000);
  const q = params.get('q') ?? '';
  const setQ = (v) => history.replaceState(null, '', href('/connections', { q: v })) || dispatchEvent(new HashChangeEvent('hashchange'));
  return html`<${Page} title="Connections" curl="/api/v1/server/connections">
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (client, user, endpoint, protocol)<input type="search" value=${q} onInput=${(e) => setQ(e.currentTarget.value)} /></label>
    </form>
    <${Loaded} state=${list}>${(rows) => {
      const needle = q.toLowerCase();
      const shown = needle ? rows.filter((c) => [c.clientId, c.user, c.endpoint, c.protocolName, c.name].some((v) => String(v ?? '').toLowerCase().includes(needle))) : rows;
      return html`<div class="wrap"><table>
        <caption>${shown.length} of ${rows.length} connections, refreshed every 5 s</caption>
        <thead><tr><th scope="col">Id</th><th scope="col">Protocol</th><th scope="col">Client id</th><th scope="col">User</th><th scope="col">Endpoint</th><th scope="col">Remote</th><th scope="col">Connected</th><th scope="col" class="num">Read</th><th scope="col" class="num">Written</th></tr></thead>
        <tbody>${shown.map(
          (c) => html`<tr><td><a href=${href('/connection', { id: c.id })} aria-label=${`Connection ${c.id}`}>${c.id}</a></td><td>${c.protocolName} ${c.protocolVersion}</td><td>${c.clientId || '–'}</td><td>${c.user || '–'}</td><td>${c.endpoint}</td><td>${c.name}</td><td>${c.connectedTimeMs > 0 ? html`<time datetime=${new Date(c.connectedTimeMs).toISOString()}>${fmtTime(c.connectedTimeMs)}</time>` : '–'}</td><td class="num">${fmtBytes(c.totalBytesRead)}</td><td class="num">${fmtBytes(c.totalBytesWritten)}</td></tr>`,
        )}</tbody>
      </table></div>`;
    }}<//>
  <//>`;
}
