// Routing: #/<page>?<query>, so every view is a URL that can be bookmarked or shared, served by the one file.
import { useEffect, useState } from 'preact/hooks';

export function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/overview';
  const [path, qs] = raw.split('?');
  return { path, params: new URLSearchParams(qs ?? '') };
}
export function href(path, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v !== undefined && v !== null)).toString();
  return `#${path}${q ? `?${q}` : ''}`;
}
export function useRoute() {
  const [route, setRoute] = useState(parseHash);
  useEffect(() => {
    const on = () => setRoute(parseHash());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}
