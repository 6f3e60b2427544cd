// Helpers of the management pages: actions with their outcome, lists paged in the browser (for APIs that answer
// the whole list), URL parameters as view state, JSON blocks, durations.
import { useEffect, useState } from 'preact/hooks';
import { html } from './html.js';
import { ErrorBox, Pager } from './components.js';
import { href } from './router.js';
import { CopyCurl } from './curl.js';

/**
 * What a form bound to URL parameters holds while being edited (null: what the URL says), so that a render caused by
 * data arriving does not put the URL's values back over what the user chose or typed. `edit` is the fields'
 * onInput / onChange; the draft is dropped when the URL changes.
 */
export function useFormDraft(params, names) {
  const [draft, setDraft] = useState(null);
  const query = params.toString();
  useEffect(() => setDraft(null), [query]);
  const edit = (e) => {
    const f = new FormData(e.currentTarget.form);
    setDraft(Object.fromEntries(names.map((n) => [n, f.get(n)])));
  };
  return [draft, edit];
}

/** Rows shown at a time: a list of 10 000 renders 50 rows, the rest are a page away. */
export const PAGE_SIZE = 50;

/**
 * An action with its outcome: `run(label, fn)` calls fn, then shows "label: <the API's status>" or the API's error
 * (a 403 with its reason); `done` runs after either (a reload).
 */
export function useAction(done) {
  const [outcome, setOutcome] = useState(null);
  const [busy, setBusy] = useState(false);
  const run = async (label, fn) => {
    setBusy(true);
    setOutcome(null);
    try {
      const r = await fn();
      setOutcome({ text: `${label}: ${r && typeof r === 'object' && typeof r.status === 'string' ? r.status : 'done'}` });
      return r;
    } catch (error) {
      setOutcome({ error });
      return undefined;
    } finally {
      setBusy(false);
      if (done) void done();
    }
  };
  return { run, outcome, busy };
}

/** The outcome of the last action: a status line (announced), or the API's reason in an alert. */
export const Outcome = ({ outcome }) =>
  outcome?.error ? html`<${ErrorBox} error=${outcome.error} />` : html`<p role="status" class="outcome">${outcome?.text ?? ''}</p>`;

/** Replaces the view's URL parameters (filters): the view re-renders from the URL, so it can be bookmarked. */
export function setParams(path, params) {
  history.replaceState(null, '', href(path, params));
  dispatchEvent(new HashChangeEvent('hashchange'));
}

/** The page number from the URL (0-based, clamped). */
export const pageParam = (params) => Math.max(0, Number.parseInt(params.get('page') ?? '0', 10) || 0);

/** One page of rows of a list the API answers whole, with its pager; `to(p)` is the URL of page p. */
export function Paged({ rows, page, to, label, children }) {
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  const p = Math.min(page, pages - 1);
  return html`${children(rows.slice(p * PAGE_SIZE, (p + 1) * PAGE_SIZE))}<${Pager} page=${p} pages=${pages} label=${label} to=${to} />`;
}

/** Case-insensitive match of any of the values against a filter text. */
export const matches = (needle, ...values) => !needle || values.some((v) => String(v ?? '').toLowerCase().includes(needle.toLowerCase()));

export const Json = ({ value, label }) => html`<pre class="json" tabindex="0" aria-label=${label}>${JSON.stringify(value, null, 2)}</pre>`;

/** A duration in ms as "850 ms", "12.5 s", "3.2 min", "1.5 h", "2 d". */
export function fmtDuration(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return '–';
  const f = (n) => new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 }).format(n);
  if (ms < 1000) return `${f(ms)} ms`;
  if (ms < 60000) return `${f(ms / 1000)} s`;
  if (ms < 3600000) return `${f(ms / 60000)} min`;
  if (ms < 86400000) return `${f(ms / 3600000)} h`;
  return `${f(ms / 86400000)} d`;
}

/** A payload (Base64) as text when it is UTF-8, else its size. */
export function payloadText(b64) {
  try {
    const bytes = Uint8Array.from(atob(b64 ?? ''), (c) => c.charCodeAt(0));
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return `(${Math.ceil(((b64 ?? '').length * 3) / 4)} bytes, binary)`;
  }
}

/** Text → standard Base64 (UTF-8), for publishing. */
export const toBase64 = (text) => btoa(Array.from(new TextEncoder().encode(text), (b) => String.fromCharCode(b)).join(''));

/**
 * A destructive action takes two presses: the first turns the button into "Confirm …" (no blocking dialog).
 * `curl` ({ path, method, body }): the same call offered as a curl command beside it.
 */
export function ConfirmButton({ label, onConfirm, disabled, curl }) {
  const [armed, setArmed] = useState(false);
  return html`<span class="action"><button type="button" class=${armed ? 'danger' : ''} disabled=${disabled} onClick=${() => (armed ? (setArmed(false), onConfirm()) : setArmed(true))} onBlur=${() => setArmed(false)}>${armed ? `Confirm: ${label}` : label}</button>${curl ? html`<${CopyCurl} ...${curl} label=${label} />` : null}</span>`;
}

/** ACL entries of a principal (identities/{id}/acl, groups/{id}/acl), each linked to its resource's ACL editor. */
export const AclEntries = ({ entries }) =>
  entries.length === 0
    ? html`<p class="notice">No entries of its own.</p>`
    : html`<div class="wrap"><table>
      <thead><tr><th scope="col">Resource</th><th scope="col">Effect</th><th scope="col">Permissions</th></tr></thead>
      <tbody>${entries.map(
        (e) => html`<tr><th scope="row"><a href=${href('/acl', { type: e.resourceType, key: e.resourceKey })}>${e.resourceType} ${e.resourceKey}</a></th><td class=${`effect-${e.effect}`}>${e.effect}</td><td>${e.permissions.join(', ')}</td></tr>`,
      )}</tbody></table></div>`;
