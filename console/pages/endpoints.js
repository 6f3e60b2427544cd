// Endpoints: state followed live through the actor transition stream; start / stop / pause / resume.
import { html } from '../lib/html.js';
import { useEffect, useState } from 'preact/hooks';
import { api, actorTransitions } from '../lib/api.js';
import { useApi, useThrottled } from '../lib/hooks.js';
import { ErrorBox, Loaded, Page, stateClass } from '../lib/components.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';

export const page = { path: '/endpoints', label: 'Endpoints', group: 'Messaging', order: 20, view: Endpoints };

const ACTIONS = [
  { state: 'stopped', label: 'Stop', from: ['Started', 'Paused'] },
  { state: 'started', label: 'Start', from: ['Stopped', 'Failed'] },
  { state: 'paused', label: 'Pause', from: ['Started'] },
  { state: 'resumed', label: 'Resume', from: ['Paused'] },
];

function Endpoints() {
  const [list, reload] = useApi('/api/v1/server/interfaces');
  const [busy, setBusy] = useState('');
  const [outcome, setOutcome] = useState(null);
  const refresh = useThrottled(reload, 250);
  useEffect(() => actorTransitions('endpoint', refresh), [refresh]); // live: endpoint transitions, however caused
  const path = (e) => `/api/v1/server/interface/${encodeURIComponent(e.name)}`;
  const act = async (e, a) => {
    setBusy(e.name);
    setOutcome(null);
    try {
      const r = await api(path(e), { method: 'PATCH', body: { state: a.state } });
      setOutcome({ text: `${a.label} ${e.name}: ${r?.status ?? 'done'}` });
    } catch (error) {
      setOutcome({ error });
    } finally {
      setBusy('');
      void reload();
    }
  };
  return html`<${Page} title="Endpoints" curl="/api/v1/server/interfaces">
    ${outcome?.error ? html`<${ErrorBox} error=${outcome.error} />` : outcome ? html`<p role="status">${outcome.text}</p>` : html`<p role="status"></p>`}
    <${Loaded} state=${list}>${(rows) => html`<div class="wrap"><table>
      <caption>${rows.length} endpoints; state follows the actors live</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Address</th><th scope="col">State</th><th scope="col">Actions</th></tr></thead>
      <tbody>${rows.map(
        (e) => html`<tr data-endpoint=${e.name}>
          <th scope="row"><a href=${href('/actor', { id: `endpoint:${e.name}` })} title="Its actor and statechart">${e.name}</a></th>
          <td>${e.host}:${e.port}</td>
          <td class=${stateClass(e.state)} data-testid="state">${e.state}</td>
          <td><div class="actions">${ACTIONS.map(
            (a) => html`<span class="action"><button type="button" disabled=${busy === e.name || !a.from.includes(e.state)} aria-label=${`${a.label} ${e.name}`} onClick=${() => act(e, a)}>${a.label}</button><${CopyCurl} path=${path(e)} method="PATCH" body=${{ state: a.state }} label=${`${a.label} ${e.name}`} /></span>`,
          )}</div></td>
        </tr>`,
      )}</tbody>
    </table></div>`}<//>
  <//>`;
}
