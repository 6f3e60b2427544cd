// Models: the list (50 a page), upload (multipart, the part named "file"), download, delete.
import { html } from '../lib/html.js';
import { api, ApiError } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { href } from '../lib/router.js';
import { ConfirmButton, Outcome, Paged, matches, pageParam, setParams, useAction } from '../lib/ui.js';

export const page = { path: '/models', label: 'Models', group: 'Data', order: 91, view: Models };

const modelPath = (name) => `/api/v1/server/models/${encodeURIComponent(name)}`;

/** POST the file as multipart/form-data (what the API takes); a refusal carries the API's reason like api(). */
async function upload(name, file) {
  const body = new FormData();
  body.append('file', file, file.name);
  const res = await fetch(modelPath(name), { method: 'POST', body, credentials: 'same-origin', headers: { accept: 'application/json', 'x-requested-with': 'XMLHttpRequest' } });
  const data = await res.json().catch(() => undefined);
  if (!res.ok) throw new ApiError(res.status, typeof data?.status === 'string' ? data.status : `${res.status} ${res.statusText}`);
  return data;
}

function Models({ params }) {
  const [list, reload] = useApi('/api/v1/server/models');
  const { run, outcome, busy } = useAction(reload);
  const q = params.get('q') ?? '';
  const submit = (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const file = f.get('file');
    const name = String(f.get('name') || file?.name || '');
    if (!file || !name) return;
    void run(`Upload model ${name}`, () => upload(name, file)).then((r) => r && form.reset());
  };
  return html`<${Page} title="Models" curl="/api/v1/server/models">
    <form class="filters" onSubmit=${submit} aria-label="Upload a model">
      <label>Model file<input name="file" type="file" required /></label>
      <label>Name (default: the file's name)<input name="name" autocomplete="off" pattern="[^/]+" /></label>
      <button type="submit" class="primary" disabled=${busy}>Upload</button>
    </form>
    <${Outcome} outcome=${outcome} />
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter<input type="search" value=${q} onInput=${(e) => setParams('/models', { q: e.currentTarget.value })} /></label>
    </form>
    <${Loaded} state=${list}>${(models) => {
      const shown = models.filter((m) => matches(q, m));
      return html`<${Paged} rows=${shown} page=${pageParam(params)} label="Model" to=${(p) => href('/models', { q, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${shown.length} of ${models.length} models</caption>
        <thead><tr><th scope="col">Model</th><th scope="col">Actions</th></tr></thead>
        <tbody>${rows.map(
          (m) => html`<tr><th scope="row">${m}</th><td><div class="actions">
            <a href=${modelPath(m)} download=${m} aria-label=${`Download ${m}`}>Download</a>
            <${ConfirmButton} label=${`Delete ${m}`} disabled=${busy} curl=${{ path: modelPath(m), method: 'DELETE' }} onConfirm=${() => run(`Delete model ${m}`, () => api(modelPath(m), { method: 'DELETE' }))} />
          </div></td></tr>`,
        )}</tbody></table></div>`}<//>`;
    }}<//>
  <//>`;
}
