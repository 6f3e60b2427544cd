// REST access: every call goes through the public REST API with the user's own login cookie, so the console can
// never do what its user may not.
export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** A REST call; a 4xx/5xx becomes an ApiError carrying the reason the API gave ({"status": "..."}). */
export async function api(path, { method = 'GET', body } = {}) {
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
export function actorTransitions(kinds, onTransition) {
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
