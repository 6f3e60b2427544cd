// Switchyard web console (docs/console.md). Preact + htm: no compile step for the views, one small bundle.
// Everything goes through the public REST API (/api/v1/...) and its SSE streams with the user's own login cookie,
// so the console can never do what its user may not. Each page has its own URL (#/<page>?<query>).
import { h, render } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';

const html = htm.bind(h);

// ---------------------------------------------------------------------------------------------------------------
// REST access

export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** A REST call; a 4xx/5xx becomes an ApiError carrying the reason the API gave ({"status": "..."}). */
async function api(path, { method = 'GET', body } = {}) {
  // X-Requested-With: a 401 then carries no Basic challenge, which would open the browser's own password dialog
  const headers = { accept: 'application/json', 'x-requested-with': 'XMLHttpRequest' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let data = text;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    /* a text answer (/health) */
  }
  if (!res.ok) {
    const reason = data && typeof data === 'object' && typeof data.status === 'string' ? data.status : `${res.status} ${res.statusText}`;
    if (res.status === 401 && !path.endsWith('/login')) dispatchEvent(new CustomEvent('switchyard:unauthenticated'));
    throw new ApiError(res.status, reason);
  }
  return data;
}

/** Live actor transitions of some kinds (GET /api/v1/server/actors/sse → token → EventSource); reopens on loss. */
function actorTransitions(kinds, onTransition) {
  let closed = false;
  let es;
  let retry;
  const open = async () => {
    if (closed) return;
    try {
      const token = String(await api('/api/v1/server/actors/sse')).trim();
      if (closed) return;
      es = new EventSource(`/api/v1/server/actors/sse/stream/${encodeURIComponent(token)}?kind=${encodeURIComponent(kinds)}`);
      es.addEventListener('actorTransition', (e) => {
        try {
          onTransition(JSON.parse(e.data));
        } catch {
          /* ignore a malformed event */
        }
      });
      es.addEventListener('actorTransitionsLost', () => onTransition(undefined));
      es.onerror = () => {
        es.close(); // the token is single use: a new stream needs a new one
        if (!closed) retry = setTimeout(open, 2000);
      };
    } catch {
      if (!closed) retry = setTimeout(open, 5000);
    }
  };
  void open();
  return () => {
    closed = true;
    clearTimeout(retry);
    es?.close();
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Formatting: numbers with units, times in the viewer's zone

const nf = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
const fmtNum = (n) => (typeof n === 'number' && Number.isFinite(n) ? nf.format(n) : '–');
const fmtRate = (n, unit) => `${fmtNum(n)} ${unit}/s`;
function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${nf.format(n)} ${units[i]}`;
}
const fmtTime = (ms) => (typeof ms === 'number' && ms > 0 ? new Date(ms).toLocaleString() : '–');

// ---------------------------------------------------------------------------------------------------------------
// Routing: #/<page>?<query>

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/overview';
  const [path, qs] = raw.split('?');
  return { path, params: new URLSearchParams(qs ?? '') };
}
function href(path, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v !== undefined && v !== null)).toString();
  return `#${path}${q ? `?${q}` : ''}`;
}
function useRoute() {
  const [route, setRoute] = useState(parseHash);
  useEffect(() => {
    const on = () => setRoute(parseHash());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

// ---------------------------------------------------------------------------------------------------------------
// Data hooks and small components

/**
 * GET a path; keeps the last answer while reloading the same path; optional polling (at most once a second).
 * An answer is shown only with the path it belongs to: a new path (a filter, another page) is "loading" until its
 * own answer arrives, never the old rows under the new caption.
 */
function useApi(path, pollMs = 0) {
  const [state, setState] = useState({ path, loading: true });
  const latest = useRef(path);
  latest.current = path;
  const reload = useCallback(async () => {
    try {
      const data = await api(path);
      if (latest.current === path) setState({ path, data }); // a late answer for a path left behind is dropped
    } catch (error) {
      if (latest.current === path) setState((s) => ({ path, data: s.path === path ? s.data : undefined, error }));
    }
  }, [path]);
  useEffect(() => {
    void reload();
    if (!pollMs) return undefined;
    const t = setInterval(reload, Math.max(1000, pollMs));
    return () => clearInterval(t);
  }, [reload, pollMs]);
  return [state.path === path ? state : { path, loading: true }, reload];
}

/** At most one call per `ms` (trailing): live views render at most a few times a second. */
function useThrottled(fn, ms) {
  const ref = useRef({ timer: 0, fn });
  ref.current.fn = fn;
  useEffect(() => () => clearTimeout(ref.current.timer), []);
  return useCallback(() => {
    if (ref.current.timer) return;
    ref.current.timer = setTimeout(() => {
      ref.current.timer = 0;
      ref.current.fn();
    }, ms);
  }, [ms]);
}

const ErrorBox = ({ error }) =>
  error ? html`<p class="error" role="alert">${error.message}${error.code ? html` <span class="notice">(HTTP ${error.code})</span>` : ''}</p>` : null;

function Loaded({ state, children }) {
  if (state.loading) return html`<p class="notice" role="status">Loading…</p>`;
  return html`<${ErrorBox} error=${state.error} />${state.data !== undefined ? children(state.data) : null}`;
}

function Page({ title, children }) {
  const ref = useRef(null);
  useEffect(() => {
    document.title = `${title} · Switchyard console`;
    ref.current?.focus(); // a new page: keyboard and screen-reader users start at its heading
  }, [title]);
  return html`<h1 tabindex="-1" ref=${ref}>${title}</h1>${children}`;
}

function Pager({ page, pages, to, label }) {
  if (pages <= 1) return null;
  return html`<nav class="pager" aria-label=${`${label} pages`}>
    ${page > 0 ? html`<a href=${to(page - 1)} rel="prev">Previous</a>` : html`<span class="notice">Previous</span>`}
    <span>Page ${page + 1} of ${pages}</span>
    ${page + 1 < pages ? html`<a href=${to(page + 1)} rel="next">Next</a>` : html`<span class="notice">Next</span>`}
  </nav>`;
}

const stateClass = (s) => `state-${String(s ?? '').replace(/[^A-Za-z]/g, '')}`;

// ---------------------------------------------------------------------------------------------------------------
// Pages

function Overview() {
  const [health] = useApi('/health', 5000);
  const [status] = useApi('/api/v1/server/status', 5000);
  const [stats] = useApi('/api/v1/server/details/stats', 1000); // live rates: polled once a second
  const [top] = useApi('/api/v1/server/destination?size=5&sortBy=Published', 5000);
  let connections;
  try {
    connections = JSON.parse(stats.data?.stats ?? '{}').Connections?.current;
  } catch {
    connections = undefined;
  }
  const s = stats.data;
  return html`<${Page} title="Overview">
    <p>Health: <strong class=${stateClass(health.data)} data-testid="health">${health.data ?? (health.error ? 'unknown' : '…')}</strong></p>
    <${ErrorBox} error=${health.error} />
    <h2>Live rates</h2>
    <${ErrorBox} error=${stats.error} />
    <dl class="rates" aria-live="off">
      <div><dt>Published</dt><dd data-testid="rate-published">${s ? fmtRate(s.publishedPerSecond, 'msg') : '…'}</dd></div>
      <div><dt>Delivered</dt><dd data-testid="rate-delivered">${s ? fmtRate(s.deliveredPerSecond, 'msg') : '…'}</dd></div>
      <div><dt>Connections</dt><dd data-testid="connections">${s ? fmtNum(connections ?? s.totalConnections - s.totalDisconnections) : '…'}</dd></div>
      <div><dt>Messages published</dt><dd>${s ? fmtNum(s.totalPublishedMessages) : '…'}</dd></div>
    </dl>
    <div class="columns"><section aria-labelledby="h-subsystems">
    <h2 id="h-subsystems">Subsystems</h2>
    <${Loaded} state=${status}>${(rows) => html`<div class="wrap"><table>
      <caption>Status of each subsystem, refreshed every 5 s</caption>
      <thead><tr><th scope="col">Subsystem</th><th scope="col">Status</th><th scope="col">Detail</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr><th scope="row">${r.name}</th><td class=${stateClass(r.status)}>${r.status}</td><td>${r.comment}</td></tr>`)}</tbody>
    </table></div>`}<//>
    </section><section aria-labelledby="h-top">
    <h2 id="h-top">Top destinations</h2>
    <${Loaded} state=${top}>${(rows) =>
      rows.length === 0
        ? html`<p class="notice">No destination has subscribers yet.</p>`
        : html`<div class="wrap"><table>
      <thead><tr><th scope="col">Destination</th><th scope="col" class="num">Published</th><th scope="col" class="num">Delivered</th><th scope="col" class="num">Stored</th></tr></thead>
      <tbody>${rows.map((d) => html`<tr><th scope="row">${d.name}</th><td class="num">${fmtNum(d.publishedMessages)}</td><td class="num">${fmtNum(d.deliveredMessages)}</td><td class="num">${fmtNum(d.storedMessages)}</td></tr>`)}</tbody>
    </table></div>`}<//>
    </section></div>
  <//>`;
}

const ACTIONS = [
  { state: 'stopped', label: 'Stop', from: ['Started', 'Paused'] },
  { state: 'started', label: 'Start', from: ['Stopped', 'Failed'] },
  { state: 'paused', label: 'Pause', from: ['Started'] },
  { state: 'resumed', label: 'Resume', from: ['Paused'] },
];

function Endpoints() {
  const [list, reload] = useApi('/api/v1/server/interfaces');
  const [busy, setBusy] = useState('');
  const [outcome, setOutcome] = useState(null);
  const refresh = useThrottled(reload, 250);
  useEffect(() => actorTransitions('endpoint', refresh), [refresh]); // live: endpoint transitions, however caused
  const act = async (e, a) => {
    setBusy(e.name);
    setOutcome(null);
    try {
      const r = await api(`/api/v1/server/interface/${encodeURIComponent(e.name)}`, { method: 'PATCH', body: { state: a.state } });
      setOutcome({ text: `${a.label} ${e.name}: ${r?.status ?? 'done'}` });
    } catch (error) {
      setOutcome({ error });
    } finally {
      setBusy('');
      void reload();
    }
  };
  return html`<${Page} title="Endpoints">
    ${outcome?.error ? html`<${ErrorBox} error=${outcome.error} />` : outcome ? html`<p role="status">${outcome.text}</p>` : html`<p role="status"></p>`}
    <${Loaded} state=${list}>${(rows) => html`<div class="wrap"><table>
      <caption>${rows.length} endpoints; state follows the actors live</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Address</th><th scope="col">State</th><th scope="col">Actions</th></tr></thead>
      <tbody>${rows.map(
        (e) => html`<tr data-endpoint=${e.name}>
          <th scope="row">${e.name}</th>
          <td>${e.host}:${e.port}</td>
          <td class=${stateClass(e.state)} data-testid="state">${e.state}</td>
          <td><div class="actions">${ACTIONS.map(
            (a) => html`<button type="button" disabled=${busy === e.name || !a.from.includes(e.state)} aria-label=${`${a.label} ${e.name}`} onClick=${() => act(e, a)}>${a.label}</button>`,
          )}</div></td>
        </tr>`,
      )}</tbody>
    </table></div>`}<//>
  <//>`;
}

function Connections({ params }) {
  const [list] = useApi('/api/v1/server/connections', 5000);
  const q = params.get('q') ?? '';
  const setQ = (v) => history.replaceState(null, '', href('/connections', { q: v })) || dispatchEvent(new HashChangeEvent('hashchange'));
  return html`<${Page} title="Connections">
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter (client, user, endpoint, protocol)<input type="search" value=${q} onInput=${(e) => setQ(e.currentTarget.value)} /></label>
    </form>
    <${Loaded} state=${list}>${(rows) => {
      const needle = q.toLowerCase();
      const shown = needle ? rows.filter((c) => [c.clientId, c.user, c.endpoint, c.protocolName, c.name].some((v) => String(v ?? '').toLowerCase().includes(needle))) : rows;
      return html`<div class="wrap"><table>
        <caption>${shown.length} of ${rows.length} connections, refreshed every 5 s</caption>
        <thead><tr><th scope="col">Id</th><th scope="col">Protocol</th><th scope="col">Client id</th><th scope="col">User</th><th scope="col">Endpoint</th><th scope="col">Remote</th><th scope="col">Connected</th><th scope="col" class="num">Read</th><th scope="col" class="num">Written</th></tr></thead>
        <tbody>${shown.map(
          (c) => html`<tr><td>${c.id}</td><td>${c.protocolName} ${c.protocolVersion}</td><td>${c.clientId || '–'}</td><td>${c.user || '–'}</td><td>${c.endpoint}</td><td>${c.name}</td><td>${fmtTime(c.connectedTimeMs)}</td><td class="num">${fmtBytes(c.totalBytesRead)}</td><td class="num">${fmtBytes(c.totalBytesWritten)}</td></tr>`,
        )}</tbody>
      </table></div>`;
    }}<//>
  <//>`;
}

const DEST_PAGE = 50;

function Destinations({ params }) {
  const prefix = params.get('prefix') ?? '';
  const page = Math.max(0, Number.parseInt(params.get('page') ?? '0', 10) || 0);
  const [list] = useApi(`/api/v1/server/destination/list?prefix=${encodeURIComponent(prefix)}&pageSize=${DEST_PAGE}&pageNumber=${page}`);
  const parts = prefix.split('/').filter(Boolean);
  return html`<${Page} title="Destinations">
    <nav aria-label="Namespace">
      <ol class="crumbs">
        <li><a href=${href('/destinations')} aria-current=${prefix ? undefined : 'location'}>root</a></li>
        ${parts.map((p, i) => html`<li><a href=${href('/destinations', { prefix: parts.slice(0, i + 1).join('/') })} aria-current=${i === parts.length - 1 ? 'location' : undefined}>${p}</a></li>`)}
      </ol>
    </nav>
    <${Loaded} state=${list}>${(r) => html`
      <div class="wrap"><table>
        <caption>${fmtNum(r.totalEntries)} entries under ${prefix ? `“${prefix}”` : 'the root'}</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col" class="num">Children</th></tr></thead>
        <tbody>${r.entries.map(
          (d) => html`<tr><th scope="row">${d.destinationType === 'FOLDER' ? html`<a href=${href('/destinations', { prefix: d.fullPath })}>${d.name}/</a>` : d.name}</th><td>${d.destinationType}</td><td class="num">${d.childCount !== undefined ? fmtNum(d.childCount) : '–'}</td></tr>`,
        )}</tbody>
      </table></div>
      <${Pager} page=${r.pageNo} pages=${r.totalPages} label="Destination" to=${(p) => href('/destinations', { prefix, page: p })} />`}<//>
  <//>`;
}

const ACTOR_PAGE = 50;

function Actors({ params }) {
  const kind = params.get('kind') ?? '';
  const state = params.get('state') ?? '';
  const page = Math.max(0, Number.parseInt(params.get('page') ?? '0', 10) || 0);
  const q = new URLSearchParams({ limit: String(ACTOR_PAGE), offset: String(page * ACTOR_PAGE) });
  if (kind) q.set('kind', kind);
  if (state) q.set('state', state);
  const [list] = useApi(`/api/v1/server/actors?${q}`);
  const submit = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    location.hash = href('/actors', { kind: String(f.get('kind') ?? '').trim(), state: String(f.get('state') ?? '').trim() });
  };
  return html`<${Page} title="Actors">
    <form class="filters" role="search" onSubmit=${submit}>
      <label>Kind<input name="kind" value=${kind} placeholder="endpoint, destination, …" /></label>
      <label>State<input name="state" value=${state} placeholder="started, running, …" /></label>
      <button type="submit" class="primary">Filter</button>
      ${kind || state ? html`<a href=${href('/actors')}>Clear</a>` : null}
    </form>
    <${Loaded} state=${list}>${(r) => html`
      <div class="wrap"><table>
        <caption>${fmtNum(r.total)} actors${kind ? ` of kind ${kind}` : ''}${state ? ` in state ${state}` : ''}</caption>
        <thead><tr><th scope="col">Actor</th><th scope="col">Kind</th><th scope="col">State</th><th scope="col">Status</th><th scope="col">Parent</th><th scope="col" class="num">Children</th></tr></thead>
        <tbody>${r.items.map(
          (a) => html`<tr><th scope="row">${a.systemId}</th><td><a href=${href('/actors', { kind: a.kind })}>${a.kind}</a></td><td>${a.state}</td><td>${a.status}</td><td>${a.parent ?? '–'}</td><td class="num">${fmtNum(a.childCount)}</td></tr>`,
        )}</tbody>
      </table></div>
      <${Pager} page=${page} pages=${Math.ceil(r.total / ACTOR_PAGE)} label="Actor" to=${(p) => href('/actors', { kind, state, page: p })} />`}<//>
  <//>`;
}

const PAGES = [
  { path: '/overview', label: 'Overview', view: Overview },
  { path: '/endpoints', label: 'Endpoints', view: Endpoints },
  { path: '/connections', label: 'Connections', view: Connections },
  { path: '/destinations', label: 'Destinations', view: Destinations },
  { path: '/actors', label: 'Actors', view: Actors },
];

// ---------------------------------------------------------------------------------------------------------------
// Login and the shell

function Login({ onLogin }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    setBusy(true);
    setError(null);
    try {
      const r = await api('/api/v1/login', { method: 'POST', body: { username: f.get('username'), password: f.get('password') } });
      onLogin({ username: r.username, authOn: true });
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return html`<main id="main">
    <form class="login" onSubmit=${submit} aria-labelledby="login-title">
      <h1 id="login-title">Switchyard console</h1>
      <label>User name<input name="username" autocomplete="username" required autofocus /></label>
      <label>Password<input name="password" type="password" autocomplete="current-password" required /></label>
      <${ErrorBox} error=${error} />
      <button type="submit" class="primary" disabled=${busy}>Log in</button>
    </form>
  </main>`;
}

function Shell({ session, onLogout }) {
  const route = useRoute();
  const page = PAGES.find((p) => p.path === route.path);
  const View = page?.view;
  const logout = async () => {
    try {
      await api('/api/v1/logout', { method: 'POST', body: {} });
    } finally {
      onLogout();
    }
  };
  return html`
    <a class="skip" href="#main" onClick=${(e) => (e.preventDefault(), document.querySelector('main h1')?.focus())}>Skip to content</a>
    <header class="top">
      <p class="brand">Switchyard</p>
      <nav aria-label="Console pages"><ul>
        ${PAGES.map((p) => html`<li><a href=${href(p.path)} aria-current=${p === page ? 'page' : undefined}>${p.label}</a></li>`)}
      </ul></nav>
      <div class="who">
        ${session.authOn ? html`<span>Signed in as <strong>${session.username}</strong></span><button type="button" onClick=${logout}>Log out</button>` : html`<span>Authentication is off</span>`}
      </div>
    </header>
    <main id="main">
      ${View ? html`<${View} key=${route.path} params=${route.params} />` : html`<${Page} title="Not found"><p>No console page at ${route.path}. <a href=${href('/overview')}>Overview</a></p><//>`}
    </main>`;
}

function App() {
  const [session, setSession] = useState(undefined); // undefined: asking; null: logged out
  const [error, setError] = useState(null);
  useEffect(() => {
    api('/api/v1/session')
      .then((s) => setSession(s.status === 'Success' ? { username: s.username, authOn: true } : { authOn: false }))
      .catch((e) => (e.code === 401 ? setSession(null) : setError(e)));
    const out = () => setSession(null);
    addEventListener('switchyard:unauthenticated', out);
    return () => removeEventListener('switchyard:unauthenticated', out);
  }, []);
  if (error) return html`<main id="main"><h1>Switchyard console</h1><${ErrorBox} error=${error} /></main>`;
  if (session === undefined) return html`<p class="boot" role="status">Connecting…</p>`;
  if (session === null) return html`<${Login} onLogin=${setSession} />`;
  return html`<${Shell} session=${session} onLogout=${() => setSession(null)} />`;
}

render(html`<${App} />`, document.getElementById('app'));
