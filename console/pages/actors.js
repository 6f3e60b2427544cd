// Actors: 50 a page, filtered by kind and state.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, Pager } from '../lib/components.js';
import { fmtNum } from '../lib/format.js';
import { href } from '../lib/router.js';

export const page = { path: '/actors', label: 'Actors', group: 'Actors', order: 50, view: Actors };

const ACTOR_PAGE = 50;

function Actors({ params }) {
  const kind = params.get('kind') ?? '';
  const state = params.get('state') ?? '';
  const page = Math.max(0, Number.parseInt(params.get('page') ?? '0', 10) || 0);
  const q = new URLSearchParams({ limit: String(ACTOR_PAGE), offset: String(page * ACTOR_PAGE) });
  if (kind) q.set('kind', kind);
  if (state) q.set('state', state);
  const [list] = useApi(`/api/v1/server/actors?${q}`);
  const submit = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    location.hash = href('/actors', { kind: String(f.get('kind') ?? '').trim(), state: String(f.get('state') ?? '').trim() });
  };
  return html`<${Page} title="Actors" curl=${`/api/v1/server/actors?${q}`}>
    <form class="filters" role="search" onSubmit=${submit}>
      <label>Kind<input name="kind" value=${kind} placeholder="endpoint, destination, …" /></label>
      <label>State<input name="state" value=${state} placeholder="started, running, …" /></label>
      <button type="submit" class="primary">Filter</button>
      ${kind || state ? html`<a href=${href('/actors')}>Clear</a>` : null}
    </form>
    <${Loaded} state=${list}>${(r) => html`
      <div class="wrap"><table>
        <caption>${fmtNum(r.total)} actors${kind ? ` of kind ${kind}` : ''}${state ? ` in state ${state}` : ''}</caption>
        <thead><tr><th scope="col">Actor</th><th scope="col">Kind</th><th scope="col">State</th><th scope="col">Status</th><th scope="col">Parent</th><th scope="col" class="num">Children</th></tr></thead>
        <tbody>${r.items.map(
          (a) => html`<tr><th scope="row"><a href=${href('/actor', { id: a.systemId })}>${a.systemId}</a></th><td><a href=${href('/actors', { kind: a.kind })}>${a.kind}</a></td><td>${a.state}</td><td>${a.status}</td><td>${a.parent ?? '–'}</td><td class="num">${fmtNum(a.childCount)}</td></tr>`,
        )}</tbody>
      </table></div>
      <${Pager} page=${page} pages=${Math.ceil(r.total / ACTOR_PAGE)} label="Actor" to=${(p) => href('/actors', { kind, state, page: p })} />`}<//>
  <//>`;
}
