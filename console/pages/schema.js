// One schema: its configuration, the schema itself, where it is bound, delete.
import { html } from '../lib/html.js';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';
import { ConfirmButton, Json, Outcome, useAction } from '../lib/ui.js';
import { contextHref } from './schemas.js';

export const page = { path: '/schema', label: 'Schema', group: 'Data', nav: false, view: Schema };

function Schema({ params }) {
  const id = params.get('id') ?? '';
  const enc = encodeURIComponent(id);
  const [schema] = useApi(`/api/v1/server/schemas/${enc}`);
  const [map] = useApi('/api/v1/server/schemas/map');
  const { run, outcome, busy } = useAction();
  const contexts = Object.entries(map.data?.data ?? {}).filter(([, ids]) => ids.includes(id)).map(([c]) => c);
  return html`<${Page} title=${`Schema ${id}`} curl=${`/api/v1/server/schemas/${enc}`}>
    <p><a href=${href('/schemas')}>All schemas</a> · <a href=${`/api/v1/server/schemas/impl/${enc}`} download=${id}>Download the schema</a></p>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${schema}>${(s) => {
      const { schema: body, ...config } = s;
      return html`
      <dl class="facts">
        <div><dt>Name</dt><dd>${s.name}</dd></div><div><dt>Format</dt><dd>${s.format}</dd></div><div><dt>Version</dt><dd>${s.versionId}</dd></div>
        <div><dt>Enforcement</dt><dd>${s.labels?.enforcement ?? 'reject'}</dd></div>
        <div><dt>Created</dt><dd>${fmtTime(Date.parse(s.createdAt))}</dd></div><div><dt>Modified</dt><dd>${fmtTime(Date.parse(s.modifiedAt))}</dd></div>
      </dl>
      <h2>Bound to</h2>
      ${contexts.length ? html`<ul>${contexts.map((c) => html`<li><a href=${contextHref(c)}>${c}</a></li>`)}</ul>` : html`<p class="notice">No context.</p>`}
      <h2>Schema</h2>
      <${Json} value=${body} label="The schema" />
      <h2>Configuration</h2>
      <${Json} value=${config} label="The schema configuration" />
      <h2>Delete</h2>
      <${ConfirmButton} label=${`Delete schema ${id}`} disabled=${busy} curl=${{ path: `/api/v1/server/schemas/${enc}`, method: 'DELETE' }} onConfirm=${() => run(`Delete schema ${id}`, () => api(`/api/v1/server/schemas/${enc}`, { method: 'DELETE' })).then((r) => r && (location.hash = href('/schemas')))} />`;
    }}<//>
  <//>`;
}
