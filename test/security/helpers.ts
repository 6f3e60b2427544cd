import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import mqtt, { type IClientOptions, type IConnackPacket, type MqttClient } from 'mqtt';
import type { TestServer } from '../helpers.js';
import { basicAuth, waitUntil } from '../helpers.js';

/** Creates a user as admin; returns its uuid and Basic header. */
export async function createUser(s: TestServer, username: string, password = 'correct-horse-battery', groups: string[] = []) {
  const r = await s.inject({ method: 'POST', url: '/api/v1/auth/users', payload: { username, password } });
  if (r.statusCode !== 201) throw new Error(`create user ${username}: ${r.statusCode} ${r.body}`);
  const uuid = r.json().uniqueId as string;
  for (const g of groups) {
    const m = await s.inject({ method: 'POST', url: `/api/v1/auth/groups/${g}/${uuid}` });
    if (m.statusCode !== 200) throw new Error(`add ${username} to ${g}: ${m.statusCode} ${m.body}`);
  }
  return { uuid, auth: basicAuth(username, password), password };
}

/** A user created over REST joins `everyone`; this takes it out again (for tests of a user without those rights). */
export async function leaveEveryone(s: TestServer, uuid: string): Promise<void> {
  const everyone = await groupId(s, 'everyone');
  const r = await s.inject({ method: 'DELETE', url: `/api/v1/auth/groups/${everyone}/${uuid}` });
  if (r.statusCode !== 200) throw new Error(`remove ${uuid} from everyone: ${r.statusCode} ${r.body}`);
}

export async function createGroup(s: TestServer, name: string): Promise<string> {
  const r = await s.inject({ method: 'POST', url: '/api/v1/auth/groups', headers: { 'content-type': 'text/plain' }, payload: name });
  if (r.statusCode !== 201) throw new Error(`create group ${name}: ${r.statusCode} ${r.body}`);
  return r.json().uniqueId as string;
}

export async function groupId(s: TestServer, name: string): Promise<string> {
  const r = await s.inject(`/api/v1/auth/groups?filter=${encodeURIComponent(`name = '${name}'`)}`);
  return r.json()[0].uniqueId as string;
}

export async function login(s: TestServer, username: string, password: string, extra: Record<string, unknown> = {}) {
  return s.app.inject({ method: 'POST', url: '/api/v1/login', payload: { username, password, ...extra } });
}

/** The maps_access_token value from a login response. */
export function tokenOf(r: { headers: Record<string, unknown> }): string {
  const raw = r.headers['set-cookie'];
  const all = Array.isArray(raw) ? raw : [String(raw)];
  const c = all.find((x) => x.startsWith('maps_access_token='));
  if (!c) throw new Error('no maps_access_token cookie');
  return c.split(';')[0]!.slice('maps_access_token='.length);
}

/** audit.log lines (JSON) once one matches `pred`. */
export async function auditLines(s: TestServer, pred: (l: Record<string, unknown>) => boolean): Promise<Array<Record<string, unknown>>> {
  const file = join(s.dataDir, 'log', 'audit.log');
  let lines: Array<Record<string, unknown>> = [];
  await waitUntil(
    () => {
      if (!existsSync(file)) return false;
      lines = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
      return lines.some(pred);
    },
    5000,
    'audit line',
  );
  return lines;
}

/** mqtt.js clients against one broker URL (read when connecting); `endAll` ends every client made. */
export function mqttClients(url: () => string) {
  const clients: MqttClient[] = [];
  return {
    /** Connects; resolves with the client and its CONNACK, or rejects with the CONNACK error. */
    connect(opts: IClientOptions): Promise<{ c: MqttClient; connack: IConnackPacket }> {
      return new Promise((resolve, reject) => {
        const c = mqtt.connect(url(), { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
        clients.push(c);
        c.once('connect', (connack) => resolve({ c, connack }));
        c.once('error', (err) => {
          c.end(true);
          reject(err);
        });
      });
    },
    /** SUBACK codes per topic, in order (mqtt.js rejects when any topic is refused; the packet still has them). */
    subAck(c: MqttClient, topics: string[], qos: 0 | 1 = 1): Promise<number[]> {
      return new Promise((resolve) => {
        c.subscribe(Object.fromEntries(topics.map((t) => [t, { qos }])), (err, granted) => {
          const packet = (err as { packet?: { granted?: number[] } } | null)?.packet;
          resolve(packet?.granted ?? (granted ?? []).map((g) => g.qos));
        });
      });
    },
    endAll(): void {
      for (const c of clients) c.end(true);
    },
  };
}
