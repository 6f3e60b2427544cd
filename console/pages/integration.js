// One integration link: its configuration (password masked by the API), connection, counters and rates, actions.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, stateClass } from '../lib/components.js';
import { fmtBytes, fmtNum, fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';
import { Json, Outcome, useAction } from '../lib/ui.js';
import { LinkActions, sinceSend } from './integrations.js';

export const page = { path: '/integration', label: 'Integration', group: 'Integrations & devices', nav: false, view: Integration };

function Integration({ params }) {
  const name = params.get('name') ?? '';
  const enc = encodeURIComponent(name);
  const [info, reloadInfo] = useApi(`/api/v1/server/integration/${enc}`, 2000);
  const [status, reload] = useApi(`/api/v1/server/integration/${enc}/status`, 2000);
  const { run, outcome, busy } = useAction(() => Promise.all([reload(), reloadInfo()]));
  let rates = [];
  try {
    rates = Object.values(JSON.parse(status.data?.statistics ?? '{}'));
  } catch {
    rates = [];
  }
  return html`<${Page} title=${`Integration ${name}`} curl=${`/api/v1/server/integration/${enc}/status`}>
    <p><a href=${href('/integrations')}>All integrations</a> · <a href=${href('/actor', { id: `integration:${name}` })}>Its actor</a></p>
    <${Outcome} outcome=${outcome} />
    <${Loaded} state=${status}>${(s) => html`
      <dl class="facts">
        <div><dt>Run state</dt><dd class=${stateClass(s.runState)}>${s.runState}</dd></div>
        <div><dt>Connection</dt><dd>${s.state}</dd></div>
        <div><dt>Outbox</dt><dd>${fmtNum(s.outbox)} msg</dd></div>
        <div><dt>Waiting since last send</dt><dd>${sinceSend(s, Date.now())}</dd></div>
        <div><dt>Sent</dt><dd>${fmtNum(s.messagesSent)} msg, ${fmtBytes(s.bytesSent)}</dd></div>
        <div><dt>Received</dt><dd>${fmtNum(s.messagesReceived)} msg, ${fmtBytes(s.bytesReceived)}</dd></div>
        <div><dt>Errors</dt><dd>${fmtNum(s.errors)}</dd></div>
        <div><dt>Loops dropped</dt><dd>${fmtNum(s.loopsDropped)} msg</dd></div>
        <div><dt>Refused by the peer</dt><dd>${fmtNum(s.refused)} msg</dd></div>
        <div><dt>Last read</dt><dd>${fmtTime(s.lastReadTime)}</dd></div>
        <div><dt>Last write</dt><dd>${fmtTime(s.lastWriteTime)}</dd></div>
        <div><dt>Last error</dt><dd>${s.lastError || '–'}</dd></div>
      </dl>
      <${LinkActions} name=${name} runState=${s.runState} run=${run} busy=${busy} />
      ${rates.length > 0 && html`<div class="wrap"><table><caption>Rates (moving averages)</caption>
        <thead><tr><th scope="col">Rate</th><th scope="col" class="num">Now</th><th scope="col" class="num">1 min</th><th scope="col" class="num">5 min</th><th scope="col" class="num">15 min</th></tr></thead>
        <tbody>${rates.map((m) => html`<tr><th scope="row">${m.name}</th><td class="num">${fmtNum(m.current)} ${m.unitName}</td>${['1 minute', '5 minutes', '15 minutes'].map((k) => html`<td class="num">${fmtNum(m.stats?.[k])} ${m.unitName}</td>`)}</tr>`)}</tbody></table></div>`}`}<//>
    <h2>Configuration</h2>
    <${Loaded} state=${info}>${(i) => html`<${Json} value=${i.config} label="Link configuration" />`}<//>
  <//>`;
}
