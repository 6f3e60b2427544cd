// A user: its groups (add, remove), its own ACL entries (each linked to its resource's ACL), the access check for
// it, delete.
import { html } from '../lib/html.js';
import { useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { href } from '../lib/router.js';
import { CopyCurl } from '../lib/curl.js';
import { AclEntries, ConfirmButton, Outcome, useAction } from '../lib/ui.js';

export const page = { path: '/user', label: 'User', group: 'Security', nav: false, view: User };

function User({ params }) {
  const id = params.get('id') ?? '';
  const enc = encodeURIComponent(id);
  const [user, reload] = useApi(`/api/v1/auth/users/${enc}`);
  const [groups] = useApi('/api/v1/auth/groups');
  const [acl] = useApi(`/api/v1/auth/identities/${enc}/acl`);
  const { run, outcome, busy } = useAction(reload);
  const [gid, setGid] = useState('');
  const name = user.data?.username ?? id;
  const member = (g) => user.data?.groupList.some((m) => m.uniqueId === g.uniqueId);
  return html`<${Page} title=${`User ${name}`} curl=${`/api/v1/auth/users/${enc}`}>
    <p><a href=${href('/users')}>All users</a> · <a href=${href('/acl', { identity: id })}>Check this user's access</a></p>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${user}>${(u) => html`
      <dl class="facts"><div><dt>Id</dt><dd>${u.uniqueId}</dd></div><div><dt>Groups</dt><dd>${u.groupList.length}</dd></div></dl>
      <h2>Groups</h2>
      <ul>${u.groupList.map(
        (g) => html`<li><a href=${href('/group', { id: g.uniqueId })}>${g.name}</a>
          <span class="action"><button type="button" disabled=${busy} aria-label=${`Remove ${u.username} from ${g.name}`} onClick=${() => run(`Remove from ${g.name}`, () => api(`/api/v1/auth/groups/${encodeURIComponent(g.uniqueId)}/${enc}`, { method: 'DELETE' }))}>Remove</button><${CopyCurl} path=${`/api/v1/auth/groups/${encodeURIComponent(g.uniqueId)}/${enc}`} method="DELETE" label=${`Remove ${u.username} from ${g.name}`} /></span></li>`,
      )}</ul>
      ${groups.data && html`<form class="filters" onSubmit=${(e) => (e.preventDefault(), gid && run('Add to group', () => api(`/api/v1/auth/groups/${encodeURIComponent(gid)}/${enc}`, { method: 'POST', body: {} })))}>
        <label>Add to group<select value=${gid} onChange=${(e) => setGid(e.currentTarget.value)}>
          <option value="">Choose a group</option>
          ${groups.data.filter((g) => !member(g)).map((g) => html`<option value=${g.uniqueId}>${g.name}</option>`)}
        </select></label>
        <button type="submit" disabled=${busy || !gid}>Add</button>
        ${gid ? html`<${CopyCurl} path=${`/api/v1/auth/groups/${encodeURIComponent(gid)}/${enc}`} method="POST" body=${{}} label="Add to the group" />` : null}
      </form>`}
      <h2>Delete</h2>
      <${ConfirmButton} label=${`Delete user ${u.username}`} disabled=${busy} curl=${{ path: `/api/v1/auth/users/${enc}`, method: 'DELETE' }} onConfirm=${() => run(`Delete user ${u.username}`, () => api(`/api/v1/auth/users/${enc}`, { method: 'DELETE' })).then((r) => r && (location.hash = href('/users')))} />`}<//>
    <h2>Own ACL entries</h2>
    <${Loaded} state=${acl}>${(a) => html`<${AclEntries} entries=${a.entries} />`}<//>
  <//>`;
}
