// Switchyard web console (docs/console.md). Preact + htm: no compile step for the views, one small bundle.
// Everything goes through the public REST API (/api/v1/...) and its SSE streams with the user's own login cookie,
// so the console can never do what its user may not. Each page has its own URL (#/<page>?<query>).
//
// This file is the shell (login, navigation, routing); each page is its own module in pages/, which exports
// `page = { path, label, group, order, view }` (`nav: false` keeps a detail page out of the navigation). The build
// (scripts/console.mjs) gathers every pages/*.js into the `console:pages` module, ordered by `order`: adding a page
// is adding a file. The navigation lists the pages under their `group`, the groups in the order of their first page,
// so a page naming a new group adds that group too.
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { PAGES } from 'console:pages';
import { html } from './lib/html.js';
import { api } from './lib/api.js';
import { ErrorBox, Page } from './lib/components.js';
import { href, useRoute } from './lib/router.js';
import { setCurlUser } from './lib/curl.js';

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

/** The navigation's groups: [group, pages] in the order of each group's first page (PAGES is sorted by order). */
const NAV_GROUPS = (() => {
  const groups = new Map();
  for (const p of PAGES) {
    if (p.nav === false) continue;
    const g = p.group ?? 'More';
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(p);
  }
  return [...groups];
})();

/**
 * The banner: a left sidebar on wide screens (style.css: 900 px and more), where the menu button is hidden; on
 * narrower ones a bar with the brand and a "Menu" disclosure button (aria-expanded) that shows or hides the page
 * links and the user. Choosing a page or Escape closes it (Escape gives the focus back to the button).
 */
function Banner({ current, session, onLogout }) {
  const [open, setOpen] = useState(false);
  const button = useRef(null);
  const logout = async () => {
    try {
      await api('/api/v1/logout', { method: 'POST', body: {} });
    } finally {
      onLogout();
    }
  };
  // a link chosen closes the menu; the new page's heading takes the focus (lib/components.js Page), and so does the
  // current one's when its own link is chosen, rather than the link the closed menu hides
  const choose = (e) => {
    const a = e.target.closest('a');
    if (!a) return;
    setOpen(false);
    if (a.getAttribute('aria-current') === 'page') document.querySelector('main h1')?.focus();
  };
  const onKeyDown = (e) => {
    if (e.key === 'Escape' && open) {
      setOpen(false);
      button.current?.focus();
    }
  };
  return html`<header class="side" onKeyDown=${onKeyDown}>
    <div class="bar">
      <p class="brand">Switchyard</p>
      <button type="button" class="menu" ref=${button} aria-expanded=${open ? 'true' : 'false'} aria-controls="console-menu" onClick=${() => setOpen(!open)}>Menu</button>
    </div>
    <div id="console-menu" class=${open ? 'menu-panel open' : 'menu-panel'}>
      <nav aria-label="Console pages" onClick=${choose}>
        ${NAV_GROUPS.map(([group, pages], i) => html`<div class="nav-group">
          <p class=${current?.group === group ? 'group-label current' : 'group-label'} id=${`nav-group-${i}`}>${group}</p>
          <ul aria-labelledby=${`nav-group-${i}`}>
            ${pages.map((p) => html`<li><a href=${href(p.path)} aria-current=${p === current ? 'page' : undefined}>${p.label}</a></li>`)}
          </ul>
        </div>`)}
      </nav>
      <div class="who">
        ${session.authOn ? html`<span>Signed in as <strong>${session.username}</strong></span><button type="button" onClick=${logout}>Log out</button>` : html`<span>Authentication is off</span>`}
      </div>
    </div>
  </header>`;
}

function Shell({ session, onLogout }) {
  const route = useRoute();
  const page = PAGES.find((p) => p.path === route.path);
  const View = page?.view;
  return html`
    <a class="skip" href="#main" onClick=${(e) => (e.preventDefault(), document.querySelector('main h1')?.focus())}>Skip to content</a>
    <div class="shell">
      <${Banner} current=${page} session=${session} onLogout=${onLogout} />
      <main id="main">
        ${View ? html`<${View} key=${route.path} params=${route.params} />` : html`<${Page} title="Not found"><p>No console page at ${route.path}. <a href=${href('/overview')}>Overview</a></p><//>`}
      </main>
    </div>`;
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
  setCurlUser(session);
  return html`<${Shell} session=${session} onLogout=${() => setSession(null)} />`;
}

render(html`<${App} />`, document.getElementById('app'));
