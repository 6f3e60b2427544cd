// Integrations (links to other brokers): state, counters, outbox and how long since the link last sent, polled every
// 2 s; pause / resume / stop / start each link.
import { html } from '../lib/html.js';
import { api } from '../lib/api.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, stateClass } from '../lib/components.js';
import { fmtBytes, fmtNum, fmtTime } from '../lib/format.js';
import { CopyCurl } from '../lib/curl.js';
import { href } from '../lib/router.js';
import { Outcome, fmtDuration, useAction } from '../lib/ui.js';

export const page = { path: '/integrations', label: 'Integrations', group: 'Integrations & devices', order: 80, view: Integrations };

export const LINK_ACTIONS = [
  { state: 'paused', label: 'Pause', from: ['Started'] },
  { state: 'resumed', label: 'Resume', from: ['Paused'] },
  { state: 'stopped', label: 'Stop', from: ['Started', 'Paused'] },
  { state: 'started', label: 'Start', from: ['Stopped'] },
];

/** The run-state buttons of a link; `run` from useAction. */
export function LinkActions({ name, runState, run, busy }) {
  const path = `/api/v1/server/integration/${encodeURIComponent(name)}`;
  return html`<div class="actions">${LINK_ACTIONS.map(
    (a) => html`<span class="action"><button type="button" disabled=${busy || !a.from.includes(runState)} aria-label=${`${a.label} ${name}`}
      onClick=${() => run(`${a.label} ${name}`, () => api(path, { method: 'PATCH', body: { state: a.state } }))}>${a.label}</button><${CopyCurl} path=${path} method="PATCH" body=${{ state: a.state }} label=${`${a.label} ${name}`} /></span>`,
  )}</div>`;
}

/** "12 s ago" while the link has messages waiting; how far behind its outbox is. */
export const sinceSend = (s, now) => (s.outbox === 0 ? '–' : s.lastWriteTime > 0 ? fmtDuration(now - s.lastWriteTime) : 'nothing sent yet');

function Integrations() {
  const [status, reload] = useApi('/api/v1/server/integrations/status', 2000);
  const { run, outcome, busy } = useAction(reload);
  const now = Date.now();
  return html`<${Page} title="Integrations" curl="/api/v1/server/integrations/status">
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${status}>${(r) =>
      r.list.length === 0
        ? html`<p class="notice">No integration links are configured (NetworkConnectionManager, docs/federation.md).</p>`
        : html`<div class="wrap"><table class="links">
      <caption>${r.list.length} links, refreshed every 2 s</caption>
      <thead><tr><th scope="col">Link</th><th scope="col">Run state</th><th scope="col">Connection</th><th scope="col" class="num">Sent</th><th scope="col" class="num">Received</th>
        <th scope="col" class="num">Errors</th><th scope="col" class="num">Outbox</th><th scope="col">Waiting since last send</th><th scope="col">Last error</th><th scope="col">Actions</th></tr></thead>
      <tbody>${r.list.map(
        (s) => html`<tr data-link=${s.interfaceName}><th scope="row"><a href=${href('/integration', { name: s.interfaceName })}>${s.interfaceName}</a></th>
          <td class=${stateClass(s.runState)} data-testid="run-state">${s.runState}</td><td>${s.state}</td>
          <td class="num">${fmtNum(s.messagesSent)} msg<br /><span class="notice">${fmtBytes(s.bytesSent)}</span></td>
          <td class="num">${fmtNum(s.messagesReceived)} msg<br /><span class="notice">${fmtBytes(s.bytesReceived)}</span></td>
          <td class="num">${fmtNum(s.errors)}</td><td class="num">${fmtNum(s.outbox)} msg</td><td title=${`last send ${fmtTime(s.lastWriteTime)}`}>${sinceSend(s, now)}</td>
          <td>${s.lastError || '–'}</td><td><${LinkActions} name=${s.interfaceName} runState=${s.runState} run=${run} busy=${busy} /></td></tr>`,
      )}</tbody></table></div>`}<//>
  <//>`;
}
