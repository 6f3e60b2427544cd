// Schemas: the list (filtered, 50 a page), a new schema (its config as JSON and the context it applies to), and
// the bindings (context → schema ids) from the schema map.
import { html } from '../lib/html.js';
import { useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';
import { Outcome, Paged, matches, pageParam, setParams, useAction } from '../lib/ui.js';

export const page = { path: '/schemas', label: 'Schemas', group: 'Data', order: 90, view: Schemas };

const EXAMPLE = '{\n  "uniqueId": "temperature",\n  "name": "Temperature reading",\n  "format": "json",\n  "schema": { "type": "object", "properties": { "celsius": { "type": "number" } } }\n}';

/** A context (destination name or topic filter) links to the destination, or to the namespace under its wildcard. */
export function contextHref(context) {
  const wild = context.search(/[+#]/);
  if (wild < 0) return href('/destination', { name: context });
  return href('/destinations', { prefix: context.slice(0, wild).replace(/\/+$/, '') });
}

function Schemas({ params }) {
  const [list, reload] = useApi('/api/v1/server/schemas');
  const [map, reloadMap] = useApi('/api/v1/server/schemas/map');
  const { run, outcome, busy } = useAction(() => Promise.all([reload(), reloadMap()]));
  const q = params.get('q') ?? '';
  const [draft, setDraft] = useState({ context: '', schema: EXAMPLE });
  const body = (form) => {
    const f = new FormData(form);
    return { context: String(f.get('context')), schema: String(f.get('schema')) };
  };
  const add = (e) => {
    e.preventDefault();
    const b = body(e.currentTarget);
    void run('Add schema', () => api('/api/v1/server/schemas', { method: 'POST', body: b }).then((s) => ({ status: `${s.uniqueId} version ${s.versionId}` })));
  };
  const bindings = Object.entries(map.data?.data ?? {});
  const contextsOf = (id) => bindings.filter(([, ids]) => ids.includes(id)).map(([c]) => c);
  return html`<${Page} title="Schemas" curl="/api/v1/server/schemas">
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (id, name, format)<input type="search" value=${q} onInput=${(e) => setParams('/schemas', { q: e.currentTarget.value })} /></label>
    </form>
    <${Loaded} state=${list}>${(schemas) => {
      const shown = schemas.filter((s) => matches(q, s.uniqueId, s.name, s.format));
      return html`<${Paged} rows=${shown} page=${pageParam(params)} label="Schema" to=${(p) => href('/schemas', { q, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${shown.length} of ${schemas.length} schemas</caption>
        <thead><tr><th scope="col">Id</th><th scope="col">Name</th><th scope="col">Format</th><th scope="col" class="num">Version</th><th scope="col">Bound to</th><th scope="col">Modified</th></tr></thead>
        <tbody>${rows.map(
          (s) => html`<tr><th scope="row"><a href=${href('/schema', { id: s.uniqueId })}>${s.uniqueId}</a></th><td>${s.name}</td><td>${s.format}</td><td class="num">${s.versionId}</td>
            <td>${contextsOf(s.uniqueId).map((c, i) => html`${i ? ', ' : ''}<a href=${contextHref(c)}>${c}</a>`)}</td><td>${fmtTime(Date.parse(s.modifiedAt))}</td></tr>`,
        )}</tbody></table></div>`}<//>`;
    }}<//>
    <h2>Bindings</h2>
    <${Loaded} state=${map}>${() =>
      bindings.length === 0
        ? html`<p class="notice">No schema is bound to a destination yet.</p>`
        : html`<div class="wrap"><table><caption>${bindings.length} contexts</caption>
      <thead><tr><th scope="col">Context (destination or filter)</th><th scope="col">Schemas</th></tr></thead>
      <tbody>${bindings.slice(0, 500).map(([c, ids]) => html`<tr><th scope="row"><a href=${contextHref(c)}>${c}</a></th><td>${ids.map((id, i) => html`${i ? ', ' : ''}<a href=${href('/schema', { id })}>${id}</a>`)}</td></tr>`)}</tbody></table></div>`}<//>
    <h2>Add a schema</h2>
    <form class="stack" onSubmit=${add} onInput=${(e) => setDraft(body(e.currentTarget))} aria-label="Add a schema">
      <label>Context (destination name or topic filter)<input name="context" required placeholder="sensors/+/temperature" /></label>
      <label>Schema configuration (JSON: uniqueId, name, format, schema; docs/schemas.md)<textarea name="schema" rows="8" required spellcheck="false">${EXAMPLE}</textarea></label>
      <div class="action"><button type="submit" class="primary" disabled=${busy}>Add schema</button><${CopyCurl} path="/api/v1/server/schemas" method="POST" body=${draft} label="Add schema" /></div>
    </form>
    <${Outcome} outcome=${outcome} />
  <//>`;
}
