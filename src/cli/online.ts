/** Online commands: the broker's REST API (`--url`), with Basic credentials from flags or the environment. */
import { CliError, EXIT_CLI } from './output.js';

export interface Remote {
  url: string;
  user?: string;
  password?: string;
}

export interface Answer {
  status: number;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  text: string;
}

export async function call(r: Remote, method: string, path: string, body?: unknown, opts: { auth?: boolean } = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (opts.auth !== false && r.user !== undefined) headers.authorization = `Basic ${Buffer.from(`${r.user}:${r.password ?? ''}`).toString('base64')}`;
  let res: Response;
  const url = new URL(path, r.url.endsWith('/') ? r.url : r.url + '/');
  try {
    res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(10000) });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new CliError(`cannot reach the broker at ${r.url}: ${cause?.code ?? cause?.message ?? (err as Error).message}`, EXIT_CLI.UNREACHABLE);
  }
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text };
}

/** The answer, or a CliError with the broker's `status` text and an exit code from the HTTP status. */
export function ok(a: Answer, what: string): Answer {
  if (a.status >= 200 && a.status < 300) return a;
  const why = (a.json && typeof a.json === 'object' && 'status' in a.json ? String(a.json.status) : a.text) || `HTTP ${a.status}`;
  const code = a.status === 404 ? EXIT_CLI.NOT_FOUND : a.status === 401 || a.status === 403 || a.status === 400 || a.status === 409 || a.status === 429 ? EXIT_CLI.REFUSED : EXIT_CLI.FATAL;
  throw new CliError(`${what}: ${why} (HTTP ${a.status})`, code);
}

export async function userId(r: Remote, name: string): Promise<string> {
  const list = ok(await call(r, 'GET', '/api/v1/auth/users'), 'listing users').json as Array<{ username: string; uniqueId: string }>;
  const u = list.find((x) => x.username === name);
  if (!u) throw new CliError(`no user is named "${name}"`, EXIT_CLI.NOT_FOUND);
  return u.uniqueId;
}

export async function groupId(r: Remote, name: string): Promise<string> {
  const list = ok(await call(r, 'GET', '/api/v1/auth/groups'), 'listing groups').json as Array<{ name: string; uniqueId: string }>;
  const g = list.find((x) => x.name === name);
  if (!g) throw new CliError(`no group is named "${name}"`, EXIT_CLI.NOT_FOUND);
  return g.uniqueId;
}
