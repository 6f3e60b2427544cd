// Every machine kind drawn as a statechart (GET /api/v1/server/machines and /machines/{kind}); #/machines?kind=<kind>
// shows one. The layout library is loaded by this page only.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { fmtNum } from '../lib/format.js';
import { href } from '../lib/router.js';
import { Statechart } from '../lib/statechart.js';

export const page = { path: '/machines', label: 'Machines', group: 'Actors', order: 60, view: Machines };

const NO_STATE = new Set();

function Machines({ params }) {
  const kind = params.get('kind') ?? '';
  const [list] = useApi('/api/v1/server/machines');
  return html`<${Page} title="Machines" curl=${kind ? `/api/v1/server/machines/${encodeURIComponent(kind)}` : '/api/v1/server/machines'}>
    <${Loaded} state=${list}>${(rows) => html`
      <nav aria-label="Machine kinds"><ul class="kinds">
        <li><a href=${href('/machines')} aria-current=${kind ? undefined : 'page'}>All</a></li>
        ${rows.map((m) => html`<li><a href=${href('/machines', { kind: m.kind })} aria-current=${kind === m.kind ? 'page' : undefined}>${m.kind}</a></li>`)}
      </ul></nav>
      ${rows.filter((m) => !kind || m.kind === kind).map((m) => html`<${Machine} key=${m.kind} summary=${m} />`)}`}<//>
  <//>`;
}

function Machine({ summary }) {
  const [def] = useApi(`/api/v1/server/machines/${encodeURIComponent(summary.kind)}`);
  return html`<section aria-labelledby=${`m-${summary.kind}`}>
    <h2 id=${`m-${summary.kind}`}>${summary.kind}</h2>
    <p class="notice">${fmtNum(summary.states)} states, ${fmtNum(summary.transitions)} transitions. <a href=${href('/actors', { kind: summary.kind })}>Actors of this kind</a></p>
    <${Loaded} state=${def}>${(d) => html`<div class="wrap"><${Statechart} def=${d} active=${NO_STATE} title=${`The ${d.kind} state machine`} /></div>`}<//>
  </section>`;
}
