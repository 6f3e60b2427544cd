// One destination: counters, schema, its subscriptions (each linked to its session's connection and its actor),
// publish a message, a live subscription showing arriving messages, the retained message.
import { html } from '../lib/html.js';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { useApi, useThrottled } from '../lib/hooks.js';
import { ErrorBox, Loaded, Page } from '../lib/components.js';
import { fmtBytes, fmtNum, fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';
import { liveStream } from '../lib/live.js';
import { CopyCurl } from '../lib/curl.js';
import { Outcome, fmtDuration, payloadText, setParams, toBase64, useAction } from '../lib/ui.js';

export const page = { path: '/destination', label: 'Destination', group: 'Messaging', nav: false, view: Destination };

const KEEP = 100;

/** The subscription actor of a session's filter (src/messaging/subscriptions.service.ts: `<url-encoded session>|<filter>`). */
export const subscriptionActor = (sessionId, filter) => `subscription:${encodeURIComponent(sessionId)}|${filter}`;
/** What holds a session: MQTT sessions (`mqtt:<client id>`) a connection, integration links (`link:<name>#<n>`) a link. */
export function sessionHref(sessionId) {
  const link = /^link:(.*)#\d+$/.exec(sessionId);
  return link ? href('/integration', { name: link[1] }) : href('/connection', { client: sessionId.replace(/^mqtt:/, '') });
}

function Destination({ params }) {
  const name = params.get('name') ?? '';
  const live = params.get('live') === '1';
  const [detail, reload] = useApi(`/api/v1/server/destination/detail?destinationName=${encodeURIComponent(name)}`, 5000);
  const parent = name.includes('/') ? name.slice(0, name.lastIndexOf('/')) : '';
  return html`<${Page} title=${`Destination ${name}`} curl=${`/api/v1/server/destination/detail?destinationName=${encodeURIComponent(name)}`}>
    <p><a href=${href('/destinations', { prefix: parent })}>${parent ? `Namespace ${parent}` : 'Namespace root'}</a> · <a href=${href('/actor', { id: `destination:${name}` })}>Its actor</a></p>
    <${Loaded} state=${detail}>${(d) => html`
      <dl class="facts">
        <div><dt>Type</dt><dd>${d.destination.type}</dd></div>
        <div><dt>Published</dt><dd>${fmtNum(d.destination.publishedMessages)} msg</dd></div>
        <div><dt>Delivered</dt><dd>${fmtNum(d.destination.deliveredMessages)} msg</dd></div>
        <div><dt>Stored</dt><dd>${fmtNum(d.destination.storedMessages)} msg</dd></div>
        <div><dt>Pending</dt><dd>${fmtNum(d.destination.pendingMessages)} msg</dd></div>
        <div><dt>Expired</dt><dd>${fmtNum(d.destination.expiredMessages)} msg</dd></div>
        <div><dt>Without subscribers</dt><dd>${fmtNum(d.destination.noInterestMessages)} msg</dd></div>
        <div><dt>Write time (mean)</dt><dd>${fmtDuration(d.destination.writeTimeAveNs / 1e6)}</dd></div>
        <div><dt>Schema</dt><dd>${d.destination.schemaId ? html`<a href=${href('/schema', { id: d.destination.schemaId })}>${d.destination.schemaId}</a>` : '–'}</dd></div>
        ${d.schemaValidation && html`<div><dt>Schema checks</dt><dd>${d.schemaValidation.enforcement}: ${fmtNum(d.schemaValidation.valid)} valid, ${fmtNum(d.schemaValidation.invalid)} invalid, ${fmtNum(d.schemaValidation.rejected)} rejected</dd></div>`}
      </dl>
      <h2>Subscriptions</h2>
      ${d.subscriptionList.length === 0
        ? html`<p class="notice">No subscriptions.</p>`
        : html`<div class="wrap"><table><caption>${d.subscriptionList.length} subscriptions, refreshed every 5 s</caption>
        <thead><tr><th scope="col">Session</th><th scope="col">Filter</th><th scope="col" class="num">Queued</th><th scope="col" class="num">Sent</th><th scope="col" class="num">Acked</th><th scope="col" class="num">Dropped</th><th scope="col">Paused</th><th scope="col">Actor</th></tr></thead>
        <tbody>${d.subscriptionList.slice(0, 200).map(
          (s) => html`<tr><th scope="row"><a href=${sessionHref(s.sessionId)}>${s.sessionId}</a></th><td>${s.destinationName}</td>
            <td class="num">${fmtNum(s.size)} of ${fmtNum(s.maxQueuedMessages)} msg<br /><span class="notice">${fmtBytes(s.queuedBytes)}</span></td>
            <td class="num">${fmtNum(s.messagesSent)}</td><td class="num">${fmtNum(s.messagesAcked)}</td><td class="num">${fmtNum(s.messagesDropped)}</td><td>${s.isPaused ? 'yes' : 'no'}</td>
            <td><a href=${href('/actor', { id: subscriptionActor(s.sessionId, s.destinationName) })}>subscription</a></td></tr>`,
        )}</tbody></table></div>`}`}<//>
    <div class="columns">
      <${Publish} name=${name} onDone=${reload} />
      <${Retained} name=${name} />
    </div>
    <h2>Live subscription</h2>
    ${live
      ? html`<button type="button" onClick=${() => setParams('/destination', { name })}>Stop the live subscription</button><${Live} key=${name} name=${name} />`
      : html`<p><button type="button" onClick=${() => setParams('/destination', { name, live: 1 })}>Subscribe live</button> <span class="notice">shows messages as they arrive (a subscription of your own while open)</span></p>`}
  <//>`;
}

function Publish({ name, onDone }) {
  const { run, outcome, busy } = useAction(onDone);
  const [body, setBody] = useState(null); // the request the form would send, for "copy as curl"
  const request = (form) => {
    const f = new FormData(form);
    const message = { payload: toBase64(String(f.get('payload'))), qualityOfService: Number(f.get('qos')) };
    if (f.get('contentType')) message.contentType = String(f.get('contentType'));
    return { destinationName: name, message, retain: f.get('retain') === 'on' };
  };
  const submit = (e) => {
    e.preventDefault();
    const b = request(e.currentTarget);
    void run(`Publish to ${name}`, () => api('/api/v1/messaging/publish', { method: 'POST', body: b }));
  };
  return html`<section aria-labelledby="h-publish"><h2 id="h-publish">Publish a message</h2>
    <form class="stack" onSubmit=${submit} onInput=${(e) => setBody(request(e.currentTarget))}>
      <label>Payload (text)<textarea name="payload" rows="3" spellcheck="false"></textarea></label>
      <div class="filters">
        <label>QoS<select name="qos"><option>0</option><option selected>1</option><option>2</option></select></label>
        <label>Content type<input name="contentType" placeholder="application/json" /></label>
        <label class="inline"><input type="checkbox" name="retain" /> Retain</label>
        <span class="action"><button type="submit" class="primary" disabled=${busy}>Publish</button><${CopyCurl} path="/api/v1/messaging/publish" method="POST" body=${body ?? { destinationName: name, message: { payload: '', qualityOfService: 1 }, retain: false }} label=${`Publish to ${name}`} /></span>
      </div>
    </form>
    <${Outcome} outcome=${outcome} />
  </section>`;
}

/** The topic's retained message: a stream opened with retainMessage=true delivers it first; nothing within 2 s: none. */
function Retained({ name }) {
  const [state, setState] = useState(null);
  const show = () => {
    setState({ loading: true });
    let done = false;
    let close = () => {};
    const finish = (s) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      close();
      setState(s);
    };
    const timer = setTimeout(() => finish({ none: true }), 2000);
    close = liveStream(
      `/api/v1/messaging/sse?destination=${encodeURIComponent(name)}`,
      (t) => `/api/v1/messaging/sse/stream/${encodeURIComponent(t)}?destinationName=${encodeURIComponent(name)}&retainMessage=true`,
      [name],
      (m) => finish({ message: m }),
      (st, error) => error && finish({ error }),
    );
  };
  return html`<section aria-labelledby="h-retained"><h2 id="h-retained">Retained message</h2>
    <button type="button" onClick=${show} disabled=${state?.loading}>Show the retained message</button>
    <${ErrorBox} error=${state?.error} />
    ${state?.none ? html`<p class="notice" role="status">No retained message arrived within 2 s.</p>` : null}
    ${state?.message ? html`<${Messages} list=${[state.message]} caption="Retained message" testid="retained" />` : null}
  </section>`;
}

/** A subscription of the user's own through the messaging SSE stream; keeps the last 100, renders ≤ 10 times a second. */
function Live({ name }) {
  const list = useRef([]);
  const [, setTick] = useState(0);
  const [state, setState] = useState({ state: 'connecting' });
  const render = useThrottled(() => setTick((t) => t + 1), 100, { leading: true });
  useEffect(
    () =>
      liveStream(
        `/api/v1/messaging/sse?destination=${encodeURIComponent(name)}`,
        (t) => `/api/v1/messaging/sse/stream/${encodeURIComponent(t)}?destinationName=${encodeURIComponent(name)}&maxDepth=100`,
        [name],
        (m) => {
          list.current.unshift({ ...m, received: Date.now() });
          if (list.current.length > KEEP) list.current.length = KEEP;
          render();
        },
        (st, error) => setState({ state: st, error }),
      ),
    [name],
  );
  return html`<p class="notice" role="status" data-testid="live-state">${state.state === 'open' ? 'Subscribed, waiting for messages' : state.state === 'connecting' ? 'Subscribing…' : 'Reconnecting…'}</p>
    <${ErrorBox} error=${state.error} />
    <${Messages} list=${list.current} caption=${`${list.current.length} messages received (newest first, the last ${KEEP} kept)`} />`;
}

const Messages = ({ list, caption, testid = 'messages' }) => html`<div class="wrap"><table data-testid=${testid}>
  <caption>${caption}</caption>
  <thead><tr><th scope="col">Created</th><th scope="col">Topic</th><th scope="col">QoS</th><th scope="col">Payload</th></tr></thead>
  <tbody>${list.map((m) => html`<tr><td>${fmtTime(Date.parse(m.creation))}</td><td>${m.destinationName}</td><td>${m.qualityOfService}</td><td class="payload">${payloadText(m.payload)}</td></tr>`)}</tbody>
</table></div>`;
