// One connection: its summary, session and subscriptions (each linked to its destination and its actor), the
// endpoint it came through, disconnect. Opened by id (#/connection?id=) or by client id (?client=, from a session).
import { html } from '../lib/html.js';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page } from '../lib/components.js';
import { fmtBytes, fmtNum, fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';
import { ConfirmButton, Json, Outcome, useAction } from '../lib/ui.js';
import { subscriptionActor } from './destination.js';
import { contextHref } from './schemas.js';

export const page = { path: '/connection', label: 'Connection', group: 'Messaging', nav: false, view: Connection };

function Connection({ params }) {
  const client = params.get('client');
  return client !== null ? html`<${ByClient} key=${client} client=${client} />` : html`<${Detail} key=${params.get('id')} id=${params.get('id') ?? ''} />`;
}

/** A session's connection: the open connection with that client id. */
function ByClient({ client }) {
  const [list] = useApi('/api/v1/server/connections');
  if (list.loading) return html`<${Page} title=${`Connection of ${client}`}><p class="notice" role="status">Loading…</p><//>`;
  const found = (list.data ?? []).find((c) => c.clientId === client);
  if (!found) return html`<${Page} title=${`Connection of ${client}`}><${Loaded} state=${list}>${() => html`<p>No open connection has the client id ${client} (its session may be kept without one). <a href=${href('/connections')}>Connections</a></p>`}<//><//>`;
  return html`<${Detail} id=${String(found.id)} />`;
}

function Detail({ id }) {
  const [conn] = useApi(`/api/v1/server/connections/${encodeURIComponent(id)}`, 5000);
  const { run, outcome, busy } = useAction();
  const s = conn.data?.endPointSummary;
  return html`<${Page} title=${`Connection ${s?.clientId || id}`} curl=${`/api/v1/server/connections/${encodeURIComponent(id)}`}>
    <p><a href=${href('/connections')}>All connections</a></p>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${conn}>${(c) => {
      const e = c.endPointSummary;
      const session = c.protocolInformation?.sessionInfo;
      const subs = session?.subscriptionInfo?.subscriptionContextList ?? [];
      const states = new Map((session?.subscriptionInfo?.subscriptionStateList ?? []).map((st) => [st.destinationName, st]));
      const sessionId = session?.subscriptionInfo?.sessionId ?? session?.sessionInfo?.uniqueId;
      return html`
      <dl class="facts">
        <div><dt>Protocol</dt><dd>${e.protocolName} ${e.protocolVersion}</dd></div>
        <div><dt>Client id</dt><dd>${e.clientId || '–'}</dd></div>
        <div><dt>User</dt><dd>${e.user || '–'}</dd></div>
        <div><dt>Endpoint</dt><dd><a href=${href('/actor', { id: `endpoint:${e.endpoint}` })}>${e.endpoint}</a></dd></div>
        <div><dt>Remote</dt><dd>${e.name}</dd></div>
        <div><dt>Connected</dt><dd>${fmtTime(e.connectedTimeMs)}</dd></div>
        <div><dt>Read</dt><dd>${fmtBytes(e.totalBytesRead)}</dd></div>
        <div><dt>Written</dt><dd>${fmtBytes(e.totalBytesWritten)}</dd></div>
        ${session?.sessionInfo && html`<div><dt>Session</dt><dd>${session.sessionInfo.id}${session.sessionInfo.persistentSession ? `, kept ${fmtNum(session.sessionInfo.expiry)} s` : ', clean'}</dd></div>`}
      </dl>
      <h2>Subscriptions</h2>
      ${subs.length === 0
        ? html`<p class="notice">No subscriptions.</p>`
        : html`<div class="wrap"><table><caption>${subs.length} subscriptions</caption>
        <thead><tr><th scope="col">Filter</th><th scope="col">QoS</th><th scope="col" class="num">Queued</th><th scope="col" class="num">Sent</th><th scope="col" class="num">Dropped</th><th scope="col">Actor</th></tr></thead>
        <tbody>${subs.slice(0, 500).map((sub) => {
          const st = states.get(sub.destinationName);
          return html`<tr><th scope="row"><a href=${contextHref(sub.destinationName)}>${sub.destinationName}</a></th><td>${sub.qualityOfService}</td>
            <td class="num">${st ? `${fmtNum(st.size)} msg` : '–'}</td><td class="num">${st ? fmtNum(st.messagesSent) : '–'}</td><td class="num">${st ? fmtNum(st.messagesDropped) : '–'}</td>
            <td>${sessionId ? html`<a href=${href('/actor', { id: subscriptionActor(sessionId, sub.destinationName) })}>subscription</a>` : '–'}</td></tr>`;
        })}</tbody></table></div>`}
      <h2>Disconnect</h2>
      <${ConfirmButton} label=${`Disconnect ${e.clientId || e.name}`} disabled=${busy} curl=${{ path: `/api/v1/server/connections/${encodeURIComponent(id)}`, method: 'DELETE' }} onConfirm=${() => run(`Disconnect ${e.clientId || e.name}`, () => api(`/api/v1/server/connections/${encodeURIComponent(id)}`, { method: 'DELETE' }))} />
      <details><summary>Protocol information as JSON</summary><${Json} value=${c.protocolInformation} label="Protocol information" /></details>`;
    }}<//>
  <//>`;
}
