import { MqttBroker } from './broker.js';
import { USER_DELETED, type UserDeletion } from '../../security/types.js';
import type { Runtime, Service } from '../../runtime/runtime.js';

/**
 * Owns the MQTT broker shared by every endpoint: creates it at boot over the engine and the security service,
 * restores the persistent MQTT sessions from the store's `mqttSessions` sublevel, ends a deleted user's connections
 * and sessions, and saves and closes everything on stop (after the endpoints, which depend on it, have closed their
 * listeners).
 */
declare module '../../runtime/runtime.js' {
  interface RuntimeServices {
    mqttBroker: MqttBrokerService;
  }
}

export class MqttBrokerService implements Service {
  readonly name = 'mqttBroker';
  // persistent REST sessions are restored hibernated before any MQTT client can connect
  readonly dependsOn = ['security', 'messaging', 'restSessions'] as const;
  broker: MqttBroker | undefined;
  private rt!: Runtime;

  /** A user was deleted: its MQTT connections and sessions end (counted into the audit line). */
  private readonly onUserDeleted = (d: UserDeletion): void => {
    const n = this.broker?.endUser(d.uniqueId, d.username);
    if (n) {
      d.ended.mqttConnections = n.connections;
      d.ended.mqttSessions = n.sessions;
    }
  };

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    rt.on(USER_DELETED, this.onUserDeleted);
    this.broker = new MqttBroker({
      engine: () => rt.engine,
      security: () => rt.security,
      get serverName() {
        return rt.serverName;
      },
      network: rt.network,
      log: rt.log.child({ name: 'mqtt' }),
      sessions: rt.store.sublevel('mqttSessions'), // not 'sessions': REST login sessions live there
      maxQueuedMessages: rt.config.DestinationManager.maxQueuedMessages,
    });
    const restored = await this.broker.restore();
    if (restored) rt.log.info({ sessions: restored }, 'persistent MQTT sessions restored');
  }

  async stop(): Promise<void> {
    this.rt.off(USER_DELETED, this.onUserDeleted);
    await this.broker?.close();
    this.broker = undefined;
  }
}

export function mqttBrokerService(): MqttBrokerService {
  return new MqttBrokerService();
}
