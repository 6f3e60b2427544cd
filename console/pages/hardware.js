// Hardware: the I²C devices known (configured or found by a scan) with their state, polled every 5 s; a scan.
import { html } from '../lib/html.js';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, stateClass } from '../lib/components.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';
import { Outcome, Paged, pageParam, useAction } from '../lib/ui.js';

export const page = { path: '/hardware', label: 'Hardware', group: 'Integrations & devices', order: 86, view: Hardware };

function Hardware({ params }) {
  const [list, reload] = useApi('/api/v1/server/hardware', 5000);
  const { run, outcome, busy } = useAction(reload);
  return html`<${Page} title="Hardware" curl="/api/v1/server/hardware">
    <div class="actions"><button type="button" disabled=${busy} onClick=${() => run('Scan', () => api('/api/v1/server/hardware/scan', { method: 'POST', body: {} }).then((found) => ({ status: Array.isArray(found) ? `${found.length} devices found` : 'done' })))}>Scan the buses</button><${CopyCurl} path="/api/v1/server/hardware/scan" method="POST" body=${{}} label="Scan the buses" /></div>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${list}>${(devices) =>
      devices.length === 0
        ? html`<p class="notice">No devices: none configured (DeviceManager) and none found by a scan.</p>`
        : html`<${Paged} rows=${devices} page=${pageParam(params)} label="Device" to=${(p) => href('/hardware', { page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${devices.length} devices, refreshed every 5 s</caption>
        <thead><tr><th scope="col">Device</th><th scope="col">Type</th><th scope="col">Description</th><th scope="col">State</th></tr></thead>
        <tbody>${rows.map((d) => html`<tr><th scope="row"><a href=${href('/actor', { id: `device:${d.name}` })}>${d.name}</a></th><td>${d.type}</td><td>${d.description}</td><td class=${stateClass(d.state)}>${d.state}</td></tr>`)}</tbody>
      </table></div>`}<//>`}<//>
  <//>`;
}
