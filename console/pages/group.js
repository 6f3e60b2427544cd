// A group: its members (add, remove; 50 a page), its own ACL entries, delete.
import { html } from '../lib/html.js';
import { useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';
import { AclEntries, ConfirmButton, Outcome, Paged, pageParam, useAction } from '../lib/ui.js';

export const page = { path: '/group', label: 'Group', group: 'Security', nav: false, view: Group };

function Group({ params }) {
  const id = params.get('id') ?? '';
  const enc = encodeURIComponent(id);
  const [group, reload] = useApi(`/api/v1/auth/groups/${enc}`);
  const [users] = useApi('/api/v1/auth/users');
  const [acl] = useApi(`/api/v1/auth/groups/${enc}/acl`);
  const { run, outcome, busy } = useAction(reload);
  const [uid, setUid] = useState('');
  const name = group.data?.name ?? id;
  return html`<${Page} title=${`Group ${name}`} curl=${`/api/v1/auth/groups/${enc}`}>
    <p><a href=${href('/groups')}>All groups</a></p>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${group}>${(g) => {
      const inGroup = new Set(g.usersList.map((u) => u.uniqueId));
      return html`
      <h2>Members</h2>
      ${users.data && html`<form class="filters" onSubmit=${(e) => (e.preventDefault(), uid && run('Add member', () => api(`/api/v1/auth/groups/${enc}/${encodeURIComponent(uid)}`, { method: 'POST', body: {} })))}>
        <label>Add a member<select value=${uid} onChange=${(e) => setUid(e.currentTarget.value)}>
          <option value="">Choose a user</option>
          ${users.data.filter((u) => !inGroup.has(u.uniqueId)).slice(0, 1000).map((u) => html`<option value=${u.uniqueId}>${u.username}</option>`)}
        </select></label>
        <button type="submit" disabled=${busy || !uid}>Add</button>
        ${uid ? html`<${CopyCurl} path=${`/api/v1/auth/groups/${enc}/${encodeURIComponent(uid)}`} method="POST" body=${{}} label="Add the member" />` : null}
      </form>`}
      <${Paged} rows=${g.usersList} page=${pageParam(params)} label="Member" to=${(p) => href('/group', { id, page: p })}>${(rows) => html`<div class="wrap"><table>
        <caption>${g.usersList.length} members</caption>
        <thead><tr><th scope="col">User</th><th scope="col">Id</th><th scope="col">Actions</th></tr></thead>
        <tbody>${rows.map(
          (u) => html`<tr><th scope="row"><a href=${href('/user', { id: u.uniqueId })}>${u.username}</a></th><td class="id">${u.uniqueId}</td>
            <td><span class="action"><button type="button" disabled=${busy} aria-label=${`Remove ${u.username} from ${g.name}`} onClick=${() => run(`Remove ${u.username}`, () => api(`/api/v1/auth/groups/${enc}/${encodeURIComponent(u.uniqueId)}`, { method: 'DELETE' }))}>Remove</button><${CopyCurl} path=${`/api/v1/auth/groups/${enc}/${encodeURIComponent(u.uniqueId)}`} method="DELETE" label=${`Remove ${u.username} from ${g.name}`} /></span></td></tr>`,
        )}</tbody></table></div>`}<//>
      <h2>Delete</h2>
      <${ConfirmButton} label=${`Delete group ${g.name}`} disabled=${busy} curl=${{ path: `/api/v1/auth/groups/${enc}`, method: 'DELETE' }} onConfirm=${() => run(`Delete group ${g.name}`, () => api(`/api/v1/auth/groups/${enc}`, { method: 'DELETE' })).then((r) => r && (location.hash = href('/groups')))} />`;
    }}<//>
    <h2>Own ACL entries</h2>
    <${Loaded} state=${acl}>${(a) => html`<${AclEntries} entries=${a.entries} />`}<//>
  <//>`;
}
