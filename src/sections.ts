/**
 * The configuration sections of the domains, registered at the composition root (imported by src/compose.ts and the
 * CLI before any configuration is loaded). src/config/schema.ts holds the core sections and the registry; it imports
 * no domain.
 */
import { ClusterSchema } from './cluster/config.js';
import { registerSections } from './config/schema.js';
import { DeviceManagerSchema } from './devices/config.js';
import { LoRaDeviceManagerSchema } from './devices/lora/config.js';
import { DiscoveryManagerSchema } from './discovery/config.js';
import { NetworkConnectionManagerSchema } from './links/link-config.js';

declare module './config/schema.js' {
  interface ConfigSections {
    DiscoveryManager: typeof DiscoveryManagerSchema;
    NetworkConnectionManager: typeof NetworkConnectionManagerSchema;
    DeviceManager: typeof DeviceManagerSchema;
    LoRaDeviceManager: typeof LoRaDeviceManagerSchema;
    Cluster: typeof ClusterSchema;
  }
}

registerSections(
  {
    DiscoveryManager: DiscoveryManagerSchema, // mDNS / NATS discovery (src/discovery/config.ts)
    NetworkConnectionManager: NetworkConnectionManagerSchema, // integration links (src/links/link-config.ts)
    DeviceManager: DeviceManagerSchema, // I²C sensors (src/devices/config.ts, docs/devices.md); default: no buses
    LoRaDeviceManager: LoRaDeviceManagerSchema, // LoRa radios on serial ports (src/devices/lora/config.ts, docs/devices.md); default: none
    Cluster: ClusterSchema, // brokers as one cluster over NATS JetStream (src/cluster/config.ts, docs/cluster.md); default: off
  },
  {
    discovery: 'DiscoveryManager',
    discoverymanagerconfig: 'DiscoveryManager',
    integrations: 'NetworkConnectionManager',
    connections: 'NetworkConnectionManager', // MAPS display name
    networkconnectionmanagerconfig: 'NetworkConnectionManager',
    hardware: 'DeviceManager',
    devices: 'DeviceManager', // MAPS display name
    devicemanagerconfig: 'DeviceManager',
    lora: 'LoRaDeviceManager',
    loradevicemanagerconfig: 'LoRaDeviceManager',
    cluster: 'Cluster',
  },
);
