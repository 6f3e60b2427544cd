// Data hooks: GET with optional polling, and a throttle for live views.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { api } from './api.js';

/**
 * GET a path; keeps the last answer while reloading the same path; optional polling (at most once a second).
 * An answer is shown only with the path it belongs to: a new path (a filter, another page) is "loading" until its
 * own answer arrives, never the old rows under the new caption.
 */
export function useApi(path, pollMs = 0) {
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

/**
 * At most one call per `ms`: live views render at most a few times a second. Trailing by default (calls within the
 * window become one call at its end); with `leading`, a call after a quiet window runs at once (a live view shows the
 * first change without waiting) and further calls within the window become one call at its end.
 */
export function useThrottled(fn, ms, { leading = false } = {}) {
  const ref = useRef({ timer: 0, pending: false, fn });
  ref.current.fn = fn;
  useEffect(() => () => clearTimeout(ref.current.timer), []);
  return useCallback(() => {
    const r = ref.current;
    if (r.timer) {
      r.pending = true;
      return;
    }
    const close = () => {
      r.timer = 0;
      if (r.pending || !leading) {
        r.pending = false;
        r.fn();
        if (leading) r.timer = setTimeout(close, ms); // the call just made opens a new window
      }
    };
    if (leading) r.fn();
    r.timer = setTimeout(close, ms);
  }, [ms, leading]);
}
