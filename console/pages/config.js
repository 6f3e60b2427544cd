// Config sections: the list, and each section's value beside its JSON Schema (type, default, description of each key).
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { href } from '../lib/router.js';
import { Json } from '../lib/ui.js';

export const page = { path: '/config', label: 'Config', group: 'Operations', order: 96, view: Config };

const show = (v) => (v === undefined ? '–' : typeof v === 'object' ? JSON.stringify(v) : String(v));
const typeOf = (s) => s?.type ?? (s?.anyOf ? s.anyOf.map((x) => x.type ?? 'value').join(' | ') : s?.enum ? s.enum.join(' | ') : '–');

function Config({ params }) {
  const [sections] = useApi('/api/v1/server/config');
  const name = params.get('section') ?? '';
  return html`<${Page} title=${name ? `Config ${name}` : 'Config'} curl=${name ? `/api/v1/server/config/${encodeURIComponent(name)}` : '/api/v1/server/config'}>
    <${Loaded} state=${sections}>${(list) => html`<nav aria-label="Config sections"><ul class="tabs">${list.map(
      (s) => html`<li><a href=${href('/config', { section: s })} aria-current=${s === name ? 'page' : undefined}>${s}</a></li>`,
    )}</ul></nav>`}<//>
    ${name ? html`<${Section} key=${name} name=${name} />` : html`<p class="notice">Choose a section.</p>`}
  <//>`;
}

function Section({ name }) {
  const [section] = useApi(`/api/v1/server/config/${encodeURIComponent(name)}`);
  return html`<${Loaded} state=${section}>${({ config, schema }) => {
    const props = Object.entries(schema?.properties ?? {});
    return html`<div class="wrap"><table>
      <caption>${props.length} keys of ${name}: value and schema</caption>
      <thead><tr><th scope="col">Key</th><th scope="col">Value</th><th scope="col">Type</th><th scope="col">Default</th><th scope="col">Description</th></tr></thead>
      <tbody>${props.map(
        ([k, s]) => html`<tr><th scope="row">${k}</th><td class="value">${show(config?.[k])}</td><td>${typeOf(s)}${s.minimum !== undefined ? ` ≥ ${s.minimum}` : ''}${s.maximum !== undefined ? ` ≤ ${s.maximum}` : ''}</td><td>${show(s.default)}</td><td>${s.description ?? ''}</td></tr>`,
      )}</tbody></table></div>
      <details><summary>The section as JSON</summary><${Json} value=${config} label=${`${name} value`} /></details>
      <details><summary>Its JSON Schema</summary><${Json} value=${schema} label=${`${name} JSON Schema`} /></details>`;
  }}<//>`;
}
