// "Copy as curl": every action (and each page's data) as the curl command that does the same through the REST API.
// The command names the user (curl asks for the password: no secret is ever copied) and the broker's own address.
import { useState } from 'preact/hooks';
import { html } from './html.js';

let who = { authOn: true, username: '' };
/** Called by the shell once the session is known: with authentication off the command carries no -u. */
export function setCurlUser(session) {
  who = session;
}

const quote = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

/** The curl command for a REST call made as the console makes it. */
export function curlOf(path, { method = 'GET', body } = {}) {
  const parts = ['curl', '--fail-with-body'];
  if (method !== 'GET') parts.push('-X', method);
  if (who.authOn) parts.push('-u', quote(who.username || 'USER'));
  if (body !== undefined) parts.push('-H', quote('Content-Type: application/json'), '--data', quote(JSON.stringify(body)));
  parts.push(quote(new URL(path, location.href).href));
  return parts.join(' ');
}

/**
 * A small button that copies the curl command of a call; it says what it copied (the command stays on screen, to
 * select by hand where the page may not use the clipboard, e.g. over plain HTTP from another host).
 */
export function CopyCurl({ path, method, body, label }) {
  const [shown, setShown] = useState(null);
  const copy = async () => {
    const command = curlOf(path, { method, body });
    let copied = false;
    try {
      await navigator.clipboard.writeText(command);
      copied = true;
    } catch {
      /* no clipboard here: the command is shown to copy by hand */
    }
    setShown({ command, copied });
  };
  return html`<span class="curl">
    <button type="button" class="small" aria-label=${`Copy as curl: ${label}`} title="Copy as curl" onClick=${copy}>curl</button>
    ${shown
      ? html`<span class="curl-out" role="status">${shown.copied ? 'Copied: ' : 'Copy this command: '}<code>${shown.command}</code>
          <button type="button" class="small" aria-label="Close the curl command" onClick=${() => setShown(null)}>×</button></span>`
      : null}
  </span>`;
}
