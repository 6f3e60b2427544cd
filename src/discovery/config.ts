import { z } from 'zod';

/**
 * Config section `DiscoveryManager` (MAPS keys `enabled`, `hostnames`, `domain`; the rest are Switchyard's).
 * Shipped default: disabled, so a broker started on a developer's or CI machine sends no multicast at all
 * (docs/discovery.md says how to enable it).
 */
export const DiscoveryManagerSchema = z
  .object({
    enabled: z.boolean().default(false).describe('run the discovery manager (mDNS and, when a NATS link is configured, NATS announcements); default off'),
    hostnames: z
      .string()
      .trim()
      .min(1)
      .max(1024)
      .default('::')
      .describe(
        'comma-separated interfaces mDNS joins and sends on: IPv4 addresses (192.168.1.10) or interface names (eth0, lo); "::", "0.0.0.0" or "*" = every interface with an IPv4 address',
      ),
    domain: z
      .string()
      .trim()
      .default('.local')
      .refine((d) => d.replace(/^\./, '').toLowerCase() === 'local', 'mDNS only serves the link-local domain .local (MAPS default)')
      .describe('DNS-SD domain; mDNS serves .local only'),
    mdns: z.boolean().default(true).describe('advertise and browse over mDNS (multicast); false: NATS announcements only'),
    ttl: z.number().int().min(10).max(4500).default(120).describe('seconds: TTL of the records we publish (mDNS and NATS); a peer not heard again within its TTL is dropped'),
    maxServers: z
      .number()
      .int()
      .min(1)
      .max(10000)
      .default(256)
      .describe('discovered servers kept at once; when full, a new server is ignored (and counted) until an entry expires or says goodbye'),
    maxServicesPerServer: z.number().int().min(1).max(1000).default(32).describe('services kept per discovered server; further ones are ignored'),
    retryInitial: z.number().int().min(10).default(1000).describe('ms before the first retry after the sockets failed to open'),
    retryMax: z.number().int().min(10).default(30000).describe('longest wait between retries'),
    nats: z
      .object({
        subject: z
          .string()
          .regex(/^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$/, 'a literal NATS subject (tokens separated by dots, no wildcards)')
          .default('switchyard.discovery')
          .describe('subject the announcements are published and listened on'),
        interval: z.number().int().min(1000).max(3600000).default(30000).describe('ms between announcements; at most a third of ttl is used, so a live peer never expires'),
        url: z
          .string()
          .regex(/^(nats|tls):\/\/\S+$/, 'nats://host:port')
          .optional()
          .describe('NATS server to announce on when no NATS link is configured in NetworkConnectionManager'),
        enabled: z.boolean().default(true).describe('announce on NATS when a NATS URL is known'),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type DiscoveryManagerConfig = z.output<typeof DiscoveryManagerSchema>;
