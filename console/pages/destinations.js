// Destinations: the namespace browser, 50 entries a page.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, Pager } from '../lib/components.js';
import { fmtNum } from '../lib/format.js';
import { href } from '../lib/router.js';

export const page = { path: '/destinations', label: 'Destinations', group: 'Messaging', order: 40, view: Destinations };

const DEST_PAGE = 50;

function Destinations({ params }) {
  const prefix = params.get('prefix') ?? '';
  const page = Math.max(0, Number.parseInt(params.get('page') ?? '0', 10) || 0);
  const [list] = useApi(`/api/v1/server/destination/list?prefix=${encodeURIComponent(prefix)}&pageSize=${DEST_PAGE}&pageNumber=${page}`);
  const parts = prefix.split('/').filter(Boolean);
  return html`<${Page} title="Destinations" curl=${`/api/v1/server/destination/list?prefix=${encodeURIComponent(prefix)}&pageSize=${DEST_PAGE}&pageNumber=${page}`}>
    <nav aria-label="Namespace">
      <ol class="crumbs">
        <li><a href=${href('/destinations')} aria-current=${prefix ? undefined : 'location'}>root</a></li>
        ${parts.map((p, i) => html`<li><a href=${href('/destinations', { prefix: parts.slice(0, i + 1).join('/') })} aria-current=${i === parts.length - 1 ? 'location' : undefined}>${p}</a></li>`)}
      </ol>
    </nav>
    <${Loaded} state=${list}>${(r) => html`
      <div class="wrap"><table>
        <caption>${fmtNum(r.totalEntries)} entries under ${prefix ? `“${prefix}”` : 'the root'}</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col" class="num">Children</th></tr></thead>
        <tbody>${r.entries.map(
          (d) => html`<tr><th scope="row">${d.destinationType === 'FOLDER' ? html`<a href=${href('/destinations', { prefix: d.fullPath })}>${d.name}/</a>` : html`<a href=${href('/destination', { name: d.fullPath })}>${d.name}</a>`}</th><td>${d.destinationType}</td><td class="num">${d.childCount !== undefined ? fmtNum(d.childCount) : '–'}</td></tr>`,
        )}</tbody>
      </table></div>
      <${Pager} page=${r.pageNo} pages=${r.totalPages} label="Destination" to=${(p) => href('/destinations', { prefix, page: p })} />`}<//>
  <//>`;
}
