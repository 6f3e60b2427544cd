/**
 * The composition root: which services a broker runs and which actor kinds exist. The kernel (src/runtime/) knows
 * none of the domains; they are put together here, and `src/main.ts`, the tests and the benchmarks call
 * `registerServices`.
 *
 * Each service names what it depends on (`dependsOn`); the runtime starts them dependencies first, in this
 * registration order otherwise, and stops them in reverse (src/runtime/service-order.ts).
 */
import './sections.js'; // the domains' configuration sections, before any configuration is loaded
import { clusterService } from './cluster/cluster.service.js';
import { clusterWillsService } from './cluster/wills.js';
import { clusterViewsService } from './cluster/views.service.js';
import { clusterMessagesService } from './cluster/messages.js';
import { clusterSessionsService, clusterStoreHook } from './cluster/sessions.js';
import { devicesService } from './devices/devices.service.js';
import { loraService } from './devices/lora/lora.service.js';
import { discoveryService } from './discovery/discovery.service.js';
import { integrationsService } from './links/integrations.service.js';
import { modelsService } from './models/models.service.js';
import { destinationsService } from './messaging/destinations.service.js';
import { endpointsService } from './endpoints/endpoints.service.js';
import { messagingService } from './messaging/messaging.service.js';
import { mqttBrokerService } from './protocol/mqtt/mqtt-broker.service.js';
import { restSessionsService } from './messaging/rest-sessions.service.js';
import type { Runtime } from './runtime/runtime.js';
import { subscriptionsService } from './messaging/subscriptions.service.js';
import { sysTopicsService } from './messaging/sys-topics.js';
import { schemasService } from './schemas/schemas.service.js';
import { securityService } from './security/service.js';
import { openSecurity } from './security/types.js';
// the kinds declared outside a service module (the others come with their services above)
import './runtime/virtual-kinds.js';
import './security/lockouts.js';

/**
 * Registers the services booted with the server tree. A service is given the services it depends on as typed
 * arguments (a missing one is a type error) and reads its start and stop order from them (`dependsOn`).
 */
export function registerServices(rt: Runtime): void {
  rt.security = openSecurity; // authentication off until the security service installs the real one at boot
  const security = securityService(); // first: rt.security must be in place before any protocol or route uses it
  rt.use(security);
  rt.use(modelsService()); // ML model store under {data}/models (before messaging: selector model functions use it)
  const clusterStore = clusterStoreHook(); // the engine's store mirrored into JetStream for cluster sessions (cluster on; the session plane below reads it)
  const messaging = messagingService({ security }, { wrapStore: clusterStore.wrapStore }); // the engine
  rt.use(messaging);
  rt.use(schemasService({ messaging })); // schema registry: binds payload schemas to destinations, $schema/<destination> topics
  const restSessions = restSessionsService({ messaging }); // persistent REST messaging sessions, restored hibernated before any endpoint runs
  rt.use(restSessions);
  const mqttBroker = mqttBrokerService({ security, messaging, restSessions }); // the MQTT broker: sessions (restored at boot) and connections
  rt.use(mqttBroker);
  const endpoints = endpointsService({ mqttBroker }); // network endpoints (one actor each, under the endpoints supervisor)
  rt.use(endpoints);
  rt.use(discoveryService({ endpoints })); // mDNS / NATS discovery (off unless DiscoveryManager.enabled)
  rt.use(subscriptionsService({ messaging })); // virtual actors for durable subscriptions (activated on demand, under the subscriptions supervisor)
  rt.use(destinationsService({ messaging })); // virtual actors for destinations (activated on demand, under the destinations supervisor)
  const integrations = integrationsService({ messaging }); // integration links (one actor each, under the integrations supervisor; outboxes in the engine)
  rt.use(integrations);
  rt.use(clusterMessagesService({ integrations })); // messages across the cluster's nodes: the link `cluster` (off unless Cluster.enabled)
  rt.use(sysTopicsService({ messaging, endpoints })); // $SYS topics into the engine
  rt.use(devicesService({ messaging })); // I²C sensors: one actor each under the devices supervisor, readings into the engine
  rt.use(loraService({ messaging })); // LoRa radios (RN2483 on serial ports): one actor each under the lora supervisor, uplinks into the engine
  const cluster = clusterService();
  rt.use(cluster); // membership of the cluster over NATS JetStream (off unless Cluster.enabled); last, so a clean stop writes its lease as left first
  rt.use(clusterWillsService({ security, mqttBroker, cluster })); // wills of this node's clients in JetStream, published by a survivor; the partition policy's refusals (off unless Cluster.enabled)
  rt.use(clusterSessionsService({ messaging, mqttBroker, cluster, integrations }, clusterStore)); // persistent MQTT sessions in JetStream, takeover across brokers (off unless Cluster.enabled)
  rt.use(clusterViewsService({ cluster })); // scope=cluster on REST lists and the cluster totals of $SYS and /metrics (off unless Cluster.enabled)
}
