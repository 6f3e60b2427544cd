// Switchyard web console (docs/console.md). Preact + htm: no compile step for the views, one small bundle.
// Everything goes through the public REST API (/api/v1/...) and its SSE streams with the user's own login cookie,
// so the console can never do what its user may not. Each page has its own URL (#/<page>?<query>).
//
// This file is the shell (login, navigation, routing); each page is its own module in pages/, which exports
// `page = { path, label, order, view }` (`nav: false` keeps a detail page out of the navigation). The build
// (scripts/console.mjs) gathers every pages/*.js into the `console:pages` module, ordered by `order`: adding a page
// is adding a file.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
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
        ${PAGES.filter((p) => p.nav !== false).map((p) => html`<li><a href=${href(p.path)} aria-current=${p === page ? 'page' : undefined}>${p.label}</a></li>`)}
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
  setCurlUser(session);
  return html`<${Shell} session=${session} onLogout=${() => setSession(null)} />`;
}

render(html`<${App} />`, document.getElementById('app'));
