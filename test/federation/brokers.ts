/**
 * Two (or more) Switchyard brokers in this process, federated through one nats-server by configuration
 * (NetworkConnectionManager), with MQTT clients on their endpoints.
 */
import mqtt, { type MqttClient } from 'mqtt';
import { startServer, type TestServer } from '../helpers.js';
import { mqttPort } from '../mqtt/helpers.js';

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
