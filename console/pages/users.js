// Users: the list (filtered, 50 a page), new users, each linked to its detail (groups, ACL entries).
import { html } from '../lib/html.js';
import { useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';
import { Outcome, Paged, matches, pageParam, setParams, useAction } from '../lib/ui.js';

export const page = { path: '/users', label: 'Users', group: 'Security', order: 70, view: Users };

function Users({ params }) {
  const [list, reload] = useApi('/api/v1/auth/users');
  const { run, outcome, busy } = useAction(reload);
  const q = params.get('q') ?? '';
  const [typed, setTyped] = useState('');
  const add = (e) => {
    e.preventDefault();
    const form = e.currentTarget;
    const f = new FormData(form);
    const username = String(f.get('username'));
    void run(`Create user ${username}`, () => api('/api/v1/auth/users', { method: 'POST', body: { username, password: String(f.get('password')) } })).then((r) => r && form.reset());
  };
  return html`<${Page} title="Users" curl="/api/v1/auth/users">
    <form class="filters" onSubmit=${add} aria-label="New user">
      <label>New user name<input name="username" required autocomplete="off" onInput=${(e) => setTyped(e.currentTarget.value)} /></label>
      <label>Password<input name="password" type="password" required autocomplete="new-password" /></label>
      <span class="action"><button type="submit" class="primary" disabled=${busy}>Create user</button><${CopyCurl} path="/api/v1/auth/users" method="POST" body=${{ username: typed, password: 'NEW-PASSWORD' }} label="Create user (the password left for you to fill in)" /></span>
    </form>
    <${Outcome} outcome=${outcome} />
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (name, id, group)<input type="search" value=${q} onInput=${(e) => setParams('/users', { q: e.currentTarget.value })} /></label>
    </form>
    <${Loaded} state=${list}>${(users) => {
      const shown = users.filter((u) => matches(q, u.username, u.uniqueId, ...u.groupList.map((g) => g.name)));
      return html`<${Paged} rows=${shown} page=${pageParam(params)} label="User" to=${(p) => href('/users', { q, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${shown.length} of ${users.length} users</caption>
        <thead><tr><th scope="col">User</th><th scope="col">Id</th><th scope="col">Groups</th></tr></thead>
        <tbody>${rows.map(
          (u) => html`<tr><th scope="row"><a href=${href('/user', { id: u.uniqueId })}>${u.username}</a></th><td class="id">${u.uniqueId}</td>
            <td>${u.groupList.map((g, i) => html`${i ? ', ' : ''}<a href=${href('/group', { id: g.uniqueId })}>${g.name}</a>`)}</td></tr>`,
        )}</tbody>
      </table></div>`}<//>`;
    }}<//>
  <//>`;
}
