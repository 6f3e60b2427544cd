// Live streams of the REST API (SSE): each needs a single-use token from a GET, then an EventSource on the stream
// URL. A lost stream is reopened with a new token (the old one is spent), after a pause.
import { api } from './api.js';

/**
 * Opens `streamUrl(token)` with a token from `tokenPath` and calls `onEvent(data, event)` for each event named in
 * `events` (data parsed as JSON). `onState('open' | 'retrying', error?)` tells a view whether it is live; a refused
 * token (a 403, a 429) is passed on so the view can show the API's reason. Returns the function that closes it.
 */
export function liveStream(tokenPath, streamUrl, events, onEvent, onState = () => {}) {
  let closed = false;
  let es;
  let retry;
  const again = (ms) => {
    if (!closed) retry = setTimeout(open, ms);
  };
  const open = async () => {
    if (closed) return;
    try {
      const token = String(await api(tokenPath)).trim();
      if (closed) return;
      es = new EventSource(streamUrl(token));
      es.onopen = () => onState('open');
      for (const name of events) {
        es.addEventListener(name, (e) => {
          let data;
          try {
            data = JSON.parse(e.data);
          } catch {
            return; // a malformed event is skipped, the stream goes on
          }
          onEvent(data, name);
        });
      }
      es.onerror = () => {
        es.close(); // the token is single use: a new stream needs a new one
        onState('retrying');
        again(2000);
      };
    } catch (error) {
      onState('retrying', error);
      // a 403 will not change by itself: try again much later, not in a loop
      again(error?.code === 403 ? 60000 : 5000);
    }
  };
  void open();
  return () => {
    closed = true;
    clearTimeout(retry);
    es?.close();
  };
}
