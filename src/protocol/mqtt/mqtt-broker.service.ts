import { MqttBroker } from './broker.js';
import type { DurableChange, Subscription } from '../../engine/index.js';
import { USER_DELETED, type UserDeletion } from '../../security/types.js';
import type { MessagingService } from '../../messaging/messaging.service.js';
import type { RestSessionsService } from '../../messaging/rest-sessions.service.js';
import type { Runtime, Service } from '../../runtime/runtime.js';
import type { SecurityManagerService } from '../../security/service.js';

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

/**
 * What the MQTT broker is given (src/compose.ts): security (authentication at connect), the engine, and the REST
 * sessions service, so that persistent REST sessions are restored hibernated before any MQTT client can connect.
 */
export interface MqttBrokerDeps {
  security: SecurityManagerService;
  messaging: MessagingService;
  restSessions: RestSessionsService;
}

export class MqttBrokerService implements Service {
  readonly name = 'mqttBroker';
  readonly dependsOn: readonly string[];
  broker: MqttBroker | undefined;
  private rt!: Runtime;

  constructor(private readonly deps: MqttBrokerDeps) {
    this.dependsOn = Object.keys(deps);
  }

  /** A user was deleted: its MQTT connections and sessions end (counted into the audit line). */
  private readonly onUserDeleted = (d: UserDeletion): void => {
    const n = this.broker?.endUser(d.uniqueId, d.username);
    if (n) {
      d.ended.mqttConnections = n.connections;
      d.ended.mqttSessions = n.sessions;
    }
  };

  /** A durable subscription closed by someone else than its session (its queue deleted) leaves the saved session. */
  private readonly onSubscriptionChanged = (sub: Subscription, change: DurableChange): void => {
    if (change === 'closed') this.broker?.subscriptionEnded(sub);
  };

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    rt.on(USER_DELETED, this.onUserDeleted);
    rt.on('subscription.changed', this.onSubscriptionChanged);
    this.broker = new MqttBroker({
      engine: () => this.deps.messaging.engine,
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
    this.rt.off('subscription.changed', this.onSubscriptionChanged);
    await this.broker?.close();
    this.broker = undefined;
  }
}

export function mqttBrokerService(deps: MqttBrokerDeps): MqttBrokerService {
  return new MqttBrokerService(deps);
}
