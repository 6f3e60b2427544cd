// Small shared components: errors, loading states, the page frame (heading and focus), the pager.
import { useEffect, useRef } from 'preact/hooks';
import { html } from './html.js';
import { CopyCurl } from './curl.js';

export const ErrorBox = ({ error }) =>
  error ? html`<p class="error" role="alert">${error.message}${error.code ? html` <span class="notice">(HTTP ${error.code})</span>` : ''}</p>` : null;

export function Loaded({ state, children }) {
  if (state.loading) return html`<p class="notice" role="status">Loading…</p>`;
  return html`<${ErrorBox} error=${state.error} />${state.data !== undefined ? children(state.data) : null}`;
}

/** A page: its heading takes the focus; `curl`: the path of the page's data, offered as a curl command. */
export function Page({ title, curl, children }) {
  const ref = useRef(null);
  useEffect(() => {
    document.title = `${title} · Switchyard console`;
    ref.current?.focus(); // a new page: keyboard and screen-reader users start at its heading
  }, [title]);
  return html`<div class="page-head"><h1 tabindex="-1" ref=${ref}>${title}</h1>${curl ? html`<${CopyCurl} path=${curl} label=${`the data of ${title}`} />` : null}</div>${children}`;
}

export function Pager({ page, pages, to, label }) {
  if (pages <= 1) return null;
  return html`<nav class="pager" aria-label=${`${label} pages`}>
    ${page > 0 ? html`<a href=${to(page - 1)} rel="prev">Previous</a>` : html`<span class="notice">Previous</span>`}
    <span>Page ${page + 1} of ${pages}</span>
    ${page + 1 < pages ? html`<a href=${to(page + 1)} rel="next">Next</a>` : html`<span class="notice">Next</span>`}
  </nav>`;
}

export const stateClass = (s) => `state-${String(s ?? '').replace(/[^A-Za-z]/g, '')}`;
