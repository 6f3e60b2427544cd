// Discovery: the servers heard (mDNS, NATS) with their services, polled every 5 s; start / stop the discovery.
import { html } from '../lib/html.js';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { CopyCurl } from '../lib/curl.js';
import { href } from '../lib/router.js';
import { Outcome, Paged, matches, pageParam, setParams, useAction } from '../lib/ui.js';

export const page = { path: '/discovery', label: 'Discovery', group: 'Integrations & devices', order: 85, view: Discovery };

function Discovery({ params }) {
  const [list, reload] = useApi('/api/v1/server/discovery', 5000);
  const { run, outcome, busy } = useAction(reload);
  const q = params.get('q') ?? '';
  const act = (state, label) => run(`${label} discovery`, () => api('/api/v1/server/discovery', { method: 'PATCH', body: { state } }));
  return html`<${Page} title="Discovery" curl="/api/v1/server/discovery">
    <div class="actions">
      <span class="action"><button type="button" disabled=${busy} onClick=${() => act('started', 'Start')}>Start discovery</button><${CopyCurl} path="/api/v1/server/discovery" method="PATCH" body=${{ state: 'started' }} label="Start discovery" /></span>
      <span class="action"><button type="button" disabled=${busy} onClick=${() => act('stopped', 'Stop')}>Stop discovery</button><${CopyCurl} path="/api/v1/server/discovery" method="PATCH" body=${{ state: 'stopped' }} label="Stop discovery" /></span>
    </div>
    <${Outcome} outcome=${outcome} />
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (server, version, address)<input type="search" value=${q} onInput=${(e) => setParams('/discovery', { q: e.currentTarget.value })} /></label>
    </form>
    <${Loaded} state=${list}>${(servers) => {
      const shown = servers.filter((s) => matches(q, s.serverName, s.version, ...Object.values(s.services).flatMap((v) => v.addresses)));
      return html`<${Paged} rows=${shown} page=${pageParam(params)} label="Server" to=${(p) => href('/discovery', { q, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${shown.length} of ${servers.length} servers heard, refreshed every 5 s</caption>
        <thead><tr><th scope="col">Server</th><th scope="col">Version</th><th scope="col">Heard through</th><th scope="col">Schemas</th><th scope="col">Services</th></tr></thead>
        <tbody>${rows.map(
          (s) => html`<tr><th scope="row">${s.serverName}</th><td>${s.version ?? '–'}</td><td>${s.via.join(', ')}</td><td>${s.schemaSupport ? `yes (${s.schemaPrefix ?? ''})` : 'no'}</td>
            <td><ul class="plain">${Object.entries(s.services).map(([n, v]) => html`<li>${n}: ${v.protocol} ${v.transport} ${v.addresses.join(', ')}:${v.port}</li>`)}</ul></td></tr>`,
        )}</tbody></table></div>`}<//>`;
    }}<//>
  <//>`;
}
