// ACLs: the editor of one resource's ACL (entries of users and groups, ALLOW or DENY, permissions) and the access
// check with the API's explanation. Both are in the URL (#/acl?type=&key=&identity=&permission=).
import { html } from '../lib/html.js';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { ErrorBox, Loaded, Page } from '../lib/components.js';
import { CopyCurl } from '../lib/curl.js';
import { href } from '../lib/router.js';
import { Outcome, setParams, useAction, useFormDraft } from '../lib/ui.js';

export const page = { path: '/acl', label: 'ACLs', group: 'Security', order: 72, view: Acl };

function Acl({ params }) {
  const [perms] = useApi('/api/v1/auth/permissions');
  const [users] = useApi('/api/v1/auth/users');
  const [groups] = useApi('/api/v1/auth/groups');
  const [server] = useApi('/api/v1/name');
  const type = params.get('type') ?? 'Server';
  const key = params.get('key') ?? (type === 'Server' ? server.data ?? '' : '');
  const types = perms.data ? perms.data.resourceTypes.split(',') : ['Server'];
  const names = new Map([...(users.data ?? []).map((u) => [u.uniqueId, `user ${u.username}`]), ...(groups.data ?? []).map((g) => [g.uniqueId, `group ${g.name}`])]);
  // the server name and the permission list arrive after the first render: what the user chose stays
  const [form, edit] = useFormDraft(params, ['type', 'key']);
  const open = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    setParams('/acl', { ...Object.fromEntries(params), type: f.get('type'), key: f.get('key') });
  };
  return html`<${Page} title="ACLs" curl="/api/v1/auth/permissions">
    <form class="filters" onSubmit=${open} aria-label="Resource">
      <label>Resource type<select name="type" value=${form?.type ?? type} onChange=${edit}>${types.map((t) => html`<option>${t}</option>`)}</select></label>
      <label>Resource key<input name="key" value=${form?.key ?? key} onInput=${edit} placeholder="a destination, / for the root" /></label>
      <button type="submit">Open ACL</button>
    </form>
    ${key ? html`<${Editor} key=${`${type} ${key}`} type=${type} resourceKey=${key} perms=${perms.data} names=${names} users=${users.data} groups=${groups.data} />` : null}
    <${Check} params=${params} type=${type} resourceKey=${key} types=${types} perms=${perms.data} users=${users.data} />
  <//>`;
}

const permsFor = (perms, type) => (perms?.permissionDetails ?? []).filter((p) => p.server === (type === 'Server'));

function Editor({ type, resourceKey, perms, names, users, groups }) {
  const path = `/api/v1/auth/resources/acl?resourceType=${encodeURIComponent(type)}&resourceKey=${encodeURIComponent(resourceKey)}`;
  const [acl, reload] = useApi(path);
  const [draft, setDraft] = useState(null); // the entries being edited; null: as the broker has them
  const { run, outcome, busy } = useAction(() => reload().then(() => setDraft(null)));
  const entries = draft ?? acl.data?.entries ?? [];
  const [principal, setPrincipal] = useState('');
  const [effect, setEffect] = useState('ALLOW');
  const [chosen, setChosen] = useState([]);
  const add = (e) => {
    e.preventDefault();
    if (!principal || chosen.length === 0) return;
    const [principalType, principalId] = principal.split(' ');
    setDraft([...entries, { principalType, principalId, effect, permissions: chosen }]);
    setChosen([]);
  };
  const save = () => run(`Save the ACL of ${type} ${resourceKey}`, () => api('/api/v1/auth/resources/acl', { method: 'PUT', body: { resourceType: type, resourceKey, entries } }));
  const toggle = (p) => setChosen(chosen.includes(p) ? chosen.filter((x) => x !== p) : [...chosen, p]);
  return html`<section aria-labelledby="h-acl">
    <h2 id="h-acl">ACL of ${type} ${resourceKey}</h2>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${acl}>${() => html`<div class="wrap"><table>
      <caption>${entries.length} entries${draft ? ' (changed, not saved)' : ''}</caption>
      <thead><tr><th scope="col">Principal</th><th scope="col">Effect</th><th scope="col">Permissions</th><th scope="col">Actions</th></tr></thead>
      <tbody>${entries.map((en, i) => {
        const who = names.get(en.principalId) ?? `${en.principalType.toLowerCase()} ${en.principalId}`;
        return html`<tr><th scope="row"><a href=${href(en.principalType === 'GROUP' ? '/group' : '/user', { id: en.principalId })}>${who}</a></th>
          <td class=${`effect-${en.effect}`}>${en.effect}</td><td>${en.permissions.join(', ')}</td>
          <td><button type="button" aria-label=${`Remove the entry of ${who}`} onClick=${() => setDraft(entries.filter((_, j) => j !== i))}>Remove</button></td></tr>`;
      })}</tbody></table></div>`}<//>
    <form class="acl-entry" onSubmit=${add} aria-label="New entry">
      <div class="filters">
        <label>Principal<select value=${principal} onChange=${(e) => setPrincipal(e.currentTarget.value)}>
          <option value="">Choose a user or group</option>
          <optgroup label="Groups">${(groups ?? []).map((g) => html`<option value=${`GROUP ${g.uniqueId}`}>${g.name}</option>`)}</optgroup>
          <optgroup label="Users">${(users ?? []).slice(0, 1000).map((u) => html`<option value=${`IDENTITY ${u.uniqueId}`}>${u.username}</option>`)}</optgroup>
        </select></label>
        <label>Effect<select value=${effect} onChange=${(e) => setEffect(e.currentTarget.value)}><option>ALLOW</option><option>DENY</option></select></label>
      </div>
      <fieldset class="checks"><legend>Permissions</legend>
        ${permsFor(perms, type).map((p) => html`<label title=${p.description}><input type="checkbox" checked=${chosen.includes(p.name)} onChange=${() => toggle(p.name)} /> ${p.name}</label>`)}
      </fieldset>
      <div class="actions">
        <button type="submit" disabled=${!principal || chosen.length === 0}>Add entry</button>
        <span class="action"><button type="button" class="primary" disabled=${busy || !draft} onClick=${save}>Save ACL</button><${CopyCurl} path="/api/v1/auth/resources/acl" method="PUT" body=${{ resourceType: type, resourceKey, entries }} label=${`Save the ACL of ${type} ${resourceKey}`} /></span>
        <button type="button" disabled=${!draft} onClick=${() => setDraft(null)}>Discard changes</button>
      </div>
    </form>
  </section>`;
}

/** POST /api/v1/auth/acl/check with explain: the decision, the reason and the entries it came from. */
function Check({ params, type, resourceKey, types, perms, users }) {
  const identity = params.get('identity') ?? '';
  const permission = params.get('permission') ?? '';
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const ask = { identityId: identity, resourceType: type, resourceKey, permission, explain: true };
  const ready = identity && resourceKey && permission;
  useEffect(() => {
    setResult(null);
    setError(null);
    if (!ready) return;
    api('/api/v1/auth/acl/check', { method: 'POST', body: ask }).then(setResult, setError);
  }, [identity, type, resourceKey, permission]);
  const [form, edit] = useFormDraft(params, ['identity', 'permission']);
  const submit = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    setParams('/acl', { ...Object.fromEntries(params), type, key: resourceKey, identity: f.get('identity'), permission: f.get('permission') });
  };
  return html`<section aria-labelledby="h-check">
    <h2 id="h-check">Access check</h2>
    <form class="filters" onSubmit=${submit} aria-label="Access check">
      <label>User<select name="identity" value=${form?.identity ?? identity} onChange=${edit}>
        <option value="">Choose a user</option>
        ${(users ?? []).slice(0, 1000).map((u) => html`<option value=${u.uniqueId}>${u.username}</option>`)}
      </select></label>
      <label>Permission<select name="permission" value=${form?.permission ?? permission} onChange=${edit}>
        <option value="">Choose a permission</option>
        ${permsFor(perms, type).map((p) => html`<option>${p.name}</option>`)}
      </select></label>
      <button type="submit">Check on ${type} ${resourceKey || '…'}</button>
      ${ready ? html`<${CopyCurl} path="/api/v1/auth/acl/check" method="POST" body=${ask} label="the access check" />` : null}
    </form>
    <${ErrorBox} error=${error} />
    ${result && html`<dl class="facts" data-testid="decision">
      <div><dt>Decision</dt><dd class=${`effect-${result.decision}`}>${result.decision}</dd></div>
      <div><dt>Why</dt><dd>${result.decisionReason ?? '–'}</dd></div>
    </dl>
    <p>${result.reason}</p>
    ${result.sources?.length ? html`<p>From:</p><ul>${result.sources.map((s) => html`<li>${s}</li>`)}</ul>` : null}`}
  </section>`;
}
