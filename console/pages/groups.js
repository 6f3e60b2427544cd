// Groups: the list with their members (50 a page), new groups, each linked to its detail.
import { html } from '../lib/html.js';
import { useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { CopyCurl } from '../lib/curl.js';
import { href } from '../lib/router.js';
import { Outcome, Paged, matches, pageParam, setParams, useAction } from '../lib/ui.js';

export const page = { path: '/groups', label: 'Groups', group: 'Security', order: 71, view: Groups };

function Groups({ params }) {
  const [list, reload] = useApi('/api/v1/auth/groups');
  const { run, outcome, busy } = useAction(reload);
  const q = params.get('q') ?? '';
  const [typed, setTyped] = useState('');
  const add = (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const name = String(new FormData(form).get('name'));
    void run(`Create group ${name}`, () => api('/api/v1/auth/groups', { method: 'POST', body: name })).then((r) => r && form.reset());
  };
  return html`<${Page} title="Groups" curl="/api/v1/auth/groups">
    <form class="filters" onSubmit=${add} aria-label="New group">
      <label>New group name<input name="name" required autocomplete="off" onInput=${(e) => setTyped(e.currentTarget.value)} /></label>
      <span class="action"><button type="submit" class="primary" disabled=${busy}>Create group</button><${CopyCurl} path="/api/v1/auth/groups" method="POST" body=${typed} label="Create group" /></span>
    </form>
    <${Outcome} outcome=${outcome} />
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (name, id, member)<input type="search" value=${q} onInput=${(e) => setParams('/groups', { q: e.currentTarget.value })} /></label>
    </form>
    <${Loaded} state=${list}>${(groups) => {
      const shown = groups.filter((g) => matches(q, g.name, g.uniqueId, ...g.usersList.map((u) => u.username)));
      return html`<${Paged} rows=${shown} page=${pageParam(params)} label="Group" to=${(p) => href('/groups', { q, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${shown.length} of ${groups.length} groups</caption>
        <thead><tr><th scope="col">Group</th><th scope="col">Id</th><th scope="col" class="num">Members</th><th scope="col">Members</th></tr></thead>
        <tbody>${rows.map(
          (g) => html`<tr><th scope="row"><a href=${href('/group', { id: g.uniqueId })}>${g.name}</a></th><td class="id">${g.uniqueId}</td><td class="num">${g.usersList.length}</td>
            <td>${g.usersList.slice(0, 20).map((u, i) => html`${i ? ', ' : ''}<a href=${href('/user', { id: u.uniqueId })}>${u.username}</a>`)}${g.usersList.length > 20 ? ` and ${g.usersList.length - 20} more` : ''}</td></tr>`,
        )}</tbody>
      </table></div>`}<//>`;
    }}<//>
  <//>`;
}
