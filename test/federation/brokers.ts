/**
 * Two (or more) Switchyard brokers in this process, federated through one nats-server by configuration
 * (NetworkConnectionManager), with MQTT clients on their endpoints.
 */
import mqtt, { type MqttClient } from 'mqtt';
import { startServer, waitUntil, type TestServer } from '../helpers.js';
import { mqttPort } from '../mqtt/helpers.js';
import { startNats, type NatsServer } from './nats-server.js';

export interface FederatedBroker {
  s: TestServer;
  mqttPort: number;
  serverName: string;
  close(): Promise<void>;
}

/** A link `fed` to the NATS server that pushes and pulls the namespace `ns` (both sides use the same config). */
export function natsLink(url: string, opts: { ns?: string; qos?: 0 | 1 | 2; name?: string; backoff?: { initial: number; max: number } } = {}) {
  const ns = opts.ns ?? 'fed/';
  const qos = opts.qos ?? 1;
  return {
    data: [
      {
        name: opts.name ?? 'fed',
        url,
        linkConfigs: [
          { direction: 'push', localNamespace: `${ns}#`, remoteNamespace: ns, qualityOfService: qos },
          { direction: 'pull', localNamespace: ns, remoteNamespace: `${ns}#`, qualityOfService: qos },
        ],
      },
    ],
    globalConfig: { backoff: opts.backoff ?? { initial: 200, max: 1000, jitter: 0 } },
  };
}

export async function startFederatedBroker(link: Record<string, unknown>, dataDir?: string): Promise<FederatedBroker> {
  const s = await startServer({ auth: false, overrides: { NetworkConnectionManager: link }, ...(dataDir ? { dataDir } : {}) });
  return { s, mqttPort: await mqttPort(s), serverName: s.rt.serverName, close: () => s.close() };
}

export async function mqttClient(port: number, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
  const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
  await new Promise<void>((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
  });
  return c;
}

export async function linkStatus(b: FederatedBroker, name = 'fed'): Promise<{ state: string; [k: string]: unknown }> {
  const r = await b.s.inject({ method: 'GET', url: `/api/v1/server/integration/${name}/status` });
  return r.json() as { state: string };
}

/** The link's connection state from GET /api/v1/server/integration/{name}. */
export async function linkInfo(b: FederatedBroker, name = 'fed'): Promise<Record<string, unknown>> {
  const r = await b.s.inject({ method: 'GET', url: `/api/v1/server/integration/${name}` });
  return r.json() as Record<string, unknown>;
}

/** One nats-server and two brokers A and B federated through it by the same link config; resolves once both links are Established. */
export async function startFederatedPair(linkOpts: Parameters<typeof natsLink>[1] = {}): Promise<{ nats: NatsServer; a: FederatedBroker; b: FederatedBroker }> {
  const nats = await startNats();
  const a = await startFederatedBroker(natsLink(nats.url, linkOpts));
  const b = await startFederatedBroker(natsLink(nats.url, linkOpts));
  await waitUntil(async () => (await linkStatus(a)).state === 'Established' && (await linkStatus(b)).state === 'Established', 20000, 'both links established');
  return { nats, a, b };
}

/** Ends the clients, closes the brokers and disposes of the nats-server (each may be undefined after a failed start). */
export async function stopFederated(clients: MqttClient[], brokers: Array<FederatedBroker | undefined>, nats: NatsServer | undefined): Promise<void> {
  for (const c of clients) c.end(true);
  for (const b of brokers) await b?.close();
  await nats?.dispose();
}
