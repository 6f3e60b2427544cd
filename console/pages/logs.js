// Logs: the broker's log, live (GET /api/v1/server/log/sse → token → EventSource), filtered by level and text in
// the URL. The last 2 000 entries are kept; the list renders at most 5 times a second however fast entries come.
import { html } from '../lib/html.js';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ErrorBox, Page } from '../lib/components.js';
import { useThrottled } from '../lib/hooks.js';
import { fmtNum } from '../lib/format.js';
import { liveStream } from '../lib/live.js';
import { setParams } from '../lib/ui.js';

export const page = { path: '/logs', label: 'Logs', group: 'Operations', order: 95, view: Logs };

const KEEP = 2000;
const SHOWN = 500;
/** logback level numbers (LogEntry.level) */
export const LEVELS = [
  ['TRACE', 5000],
  ['DEBUG', 10000],
  ['INFO', 20000],
  ['WARN', 30000],
  ['ERROR', 40000],
];
const levelName = (n) => [...LEVELS].reverse().find(([, v]) => n >= v)?.[0] ?? 'TRACE';

function Logs({ params }) {
  const level = params.get('level') ?? 'INFO';
  const q = params.get('q') ?? '';
  const entries = useRef([]);
  const [, setTick] = useState(0);
  const [live, setLive] = useState({ state: 'connecting' });
  const [paused, setPaused] = useState(false);
  const pausedRef = useRef(false);
  pausedRef.current = paused;
  const render = useThrottled(() => setTick((t) => t + 1), 200, { leading: true }); // ≤ 5 renders a second
  useEffect(
    () =>
      liveStream(
        '/api/v1/server/log/sse',
        (token) => `/api/v1/server/log/sse/stream/${encodeURIComponent(token)}`,
        ['logEvent'],
        (e) => {
          const list = entries.current;
          if (list.length && e.logNumber <= list[list.length - 1].logNumber) return; // a reopened stream repeats the stored entries
          list.push(e);
          if (list.length > KEEP) list.splice(0, list.length - KEEP);
          if (!pausedRef.current) render();
        },
        (state, error) => setLive({ state, error }),
      ),
    [],
  );
  const min = LEVELS.find(([n]) => n === level)?.[1] ?? 20000;
  const needle = q.toLowerCase();
  const shown = entries.current.filter((e) => e.level >= min && (!needle || e.message.toLowerCase().includes(needle)));
  return html`<${Page} title="Logs" curl="/api/v1/server/log">
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Lowest level<select value=${level} onChange=${(e) => setParams('/logs', { level: e.currentTarget.value, q })}>${LEVELS.map(([n]) => html`<option>${n}</option>`)}</select></label>
      <label>Text<input type="search" value=${q} onInput=${(e) => setParams('/logs', { level, q: e.currentTarget.value })} /></label>
      <button type="button" aria-pressed=${paused} onClick=${() => (setPaused(!paused), render())}>${paused ? 'Resume' : 'Pause'}</button>
    </form>
    <${ErrorBox} error=${live.error} />
    <p class="notice" role="status" data-testid="log-state">${`${live.state === 'open' ? 'Live' : live.state === 'connecting' ? 'Connecting…' : 'Reconnecting…'}${paused ? ', paused' : ''}: ${fmtNum(shown.length)} of ${fmtNum(entries.current.length)} entries${shown.length > SHOWN ? `, the newest ${SHOWN} shown` : ''}`}</p>
    <ol class="log" aria-label="Log entries, newest first" tabindex="0">
      ${shown.slice(-SHOWN).reverse().map((e) => html`<li key=${e.logNumber} class=${`log-${levelName(e.level)}`}>${e.message}</li>`)}
    </ol>
  <//>`;
}
