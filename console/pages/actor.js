// One actor: its state, context and accepted events, its machine drawn as a statechart with the current state
// highlighted and each transition animated as it arrives from the actor transition stream, and a timeline of its
// recent transitions to step back through. #/actor?id=<systemId>; linked from the actors and endpoints pages.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { html } from '../lib/html.js';
import { actorTransitions } from '../lib/api.js';
import { useApi, useThrottled } from '../lib/hooks.js';
import { ErrorBox, Loaded, Page } from '../lib/components.js';
import { fmtClock, fmtNum } from '../lib/format.js';
import { href } from '../lib/router.js';
import { Statechart, activePaths, firedTransitions } from '../lib/statechart.js';

export const page = { path: '/actor', label: 'Actor', group: 'Actors', nav: false, view: Actor };

/** Transitions kept for the timeline (the API gives the last 50; live ones are added). */
const TIMELINE = 200;

function Actor({ params }) {
  const id = params.get('id') ?? '';
  const [detail, reload] = useApi(`/api/v1/server/actors/${encodeURIComponent(id)}`);
  const d = detail.data;
  return html`<${Page} title=${`Actor ${id}`} curl=${`/api/v1/server/actors/${encodeURIComponent(id)}`}>
    <${Loaded} state=${detail}>${() => html`<${ActorView} key=${id} detail=${d} reload=${reload} />`}<//>
  <//>`;
}

function ActorView({ detail, reload }) {
  const [machine] = useApi(`/api/v1/server/machines/${encodeURIComponent(detail.machine)}`);
  const [timeline, setTimeline] = useState(() => detail.transitions.slice(-TIMELINE));
  const [seq, setSeq] = useState(0); // counts live arrivals: each one replays the animation
  const [selected, setSelected] = useState(null); // an index into timeline, or null: following live
  const incoming = useRef([]);
  const refresh = useThrottled(reload, 1000); // accepted events and context after a transition, at most once a second
  // live views render at most 10 times a second: arrivals are buffered and flushed together
  const flush = useThrottled(() => {
    const batch = incoming.current.splice(0);
    if (!batch.length) return;
    setTimeline((old) => [...old, ...batch].slice(-TIMELINE));
    setSeq((n) => n + 1);
  }, 100, { leading: true });
  useEffect(
    () =>
      actorTransitions(detail.kind, (t) => {
        if (t === undefined) return void reload(); // transitions were lost: read the actor again
        if (t.systemId !== detail.systemId) return;
        incoming.current.push(t);
        flush();
        refresh();
      }),
    [detail.kind, detail.systemId],
  );
  const last = timeline.at(-1);
  const shown = selected === null ? last : timeline[selected];
  const current = selected === null ? (seq > 0 ? last.to : detail.state) : shown?.to; // before a live arrival the API's state is the truth
  const def = machine.data;
  const active = useMemo(() => (def ? activePaths(def, current) : new Set()), [def, current]);
  const fired = useMemo(() => (def && shown ? firedTransitions(def, shown) : []), [def, shown]);
  const step = (to) => setSelected(to === null || to >= timeline.length - 1 ? null : Math.max(0, to));
  // keyboard: in the timeline, arrow up/down move to the newer/older transition (and show it), Home/End to the ends
  const keys = (e) => {
    const buttons = [...e.currentTarget.querySelectorAll('button')];
    const at = buttons.indexOf(document.activeElement);
    if (at < 0) return;
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: buttons.length - 1 }[e.key];
    if (to === undefined || to < 0 || to >= buttons.length) return;
    e.preventDefault();
    buttons[to].focus();
    step(timeline.length - 1 - to); // the list shows the newest first
  };
  const rootHandlers = def ? def.transitions.filter((t) => t.source === '') : [];
  return html`
    <dl class="facts">
      <div><dt>Kind</dt><dd><a href=${href('/actors', { kind: detail.kind })}>${detail.kind}</a></dd></div>
      <div><dt>State</dt><dd data-testid="actor-state">${selected === null ? current : html`${current} <span class="notice">(at ${fmtClock(shown?.at)}; now ${last?.to ?? detail.state})</span>`}</dd></div>
      <div><dt>Status</dt><dd>${detail.status}</dd></div>
      <div><dt>Parent</dt><dd>${detail.parent ? html`<a href=${href('/actor', { id: detail.parent })}>${detail.parent}</a>` : '–'}</dd></div>
      <div><dt>Machine</dt><dd><a href=${href('/machines', { kind: detail.machine })}>${detail.machine}</a></dd></div>
      <div><dt>Children</dt><dd>${fmtNum(detail.childCount)}</dd></div>
    </dl>
    ${detail.children.length ? html`<p>Children: ${detail.children.map((c, i) => html`${i ? ', ' : ''}<a href=${href('/actor', { id: c })}>${c}</a>`)}</p>` : null}
    <h2>Statechart</h2>
    <${ErrorBox} error=${machine.error} />
    ${def ? html`<div class="wrap"><${Statechart} def=${def} active=${active} fired=${fired} seq=${selected === null ? seq : -1 - selected} title=${`The ${def.kind} state machine of ${detail.systemId}`} /></div>` : machine.loading ? html`<p class="notice" role="status">Loading the machine…</p>` : null}
    <p class="notice">Events it accepts now: ${detail.accepts.length ? detail.accepts.join(', ') : 'none'}.${rootHandlers.length ? ` In every state: ${rootHandlers.map((t) => t.event).join(', ')}.` : ''}</p>
    <h2 id="h-timeline">Recent transitions</h2>
    <div class="actions" role="group" aria-label="Step through the transitions">
      <button type="button" disabled=${timeline.length < 2 || selected === 0} onClick=${() => step((selected ?? timeline.length - 1) - 1)}>Step back</button>
      <button type="button" disabled=${selected === null} onClick=${() => step((selected ?? 0) + 1)}>Step forward</button>
      <button type="button" disabled=${selected === null} onClick=${() => setSelected(null)}>Follow live</button>
      <span class="notice" role="status">${selected === null ? 'Following live transitions' : `Showing transition ${selected + 1} of ${timeline.length}`}</span>
    </div>
    ${timeline.length === 0
      ? html`<p class="notice">No transition since the server started.</p>`
      : html`<ol class="timeline" reversed aria-labelledby="h-timeline" onKeyDown=${keys}>${timeline
          .map((t, i) => html`<li key=${`${t.at}-${i}`}>
            <button type="button" aria-pressed=${selected === i || (selected === null && i === timeline.length - 1) ? 'true' : 'false'} onClick=${() => step(i)}>
              <time datetime=${new Date(t.at).toISOString()}>${fmtClock(t.at)}</time> ${t.from} → <strong>${t.to}</strong> <span class="notice">on ${t.event}</span>
            </button>
          </li>`)
          .reverse()}</ol>`}
    <h2>Context</h2>
    <pre class="context">${JSON.stringify(detail.context, null, 2)}</pre>`;
}
