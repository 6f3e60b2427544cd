import { z } from 'zod';

/**
 * Configuration sections, named as in MAPS. Each section is a strict zod schema with defaults, so an unknown key
 * (a typo) stops start-up instead of being ignored. The same schemas give the JSON Schema served by
 * `GET /api/v1/server/config/{name}`.
 */

const port = z.number().int().min(0, 'a port between 0 and 65535 (0 picks a free port)').max(65535, 'a port between 0 and 65535 (0 picks a free port)');
const millis = z.number().int().nonnegative();

export const MessageDaemonSchema = z
  .object({
    serverName: z.string().min(1).max(128).optional().describe('Unique server name; generated on first boot when absent'),
    dataDirectory: z.string().min(1).default('./data').describe('Where the store and the logs live'),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
    logEntriesInMemory: z.number().int().min(1).max(100000).default(100).describe('Entries kept for /api/v1/server/log'),
    logHistoryDays: z.number().int().min(1).max(365).default(7),
    enableSystemTopics: z.boolean().default(true),
    enableSystemStatusTopics: z.boolean().default(true),
    enableSystemTopicAverages: z.boolean().default(true),
    systemTopicInterval: z.number().int().min(100).default(10000).describe('ms between $SYS updates'),
    shutdownTimeout: z.number().int().min(100).max(600000).default(10000).describe('ms a graceful shutdown may take'),
    supervisor: z
      .object({
        intensity: z.number().int().min(0).default(5).describe('restarts allowed within period'),
        period: millis.default(60000),
        backoffInitial: millis.default(200),
        backoffMax: millis.default(10000),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export const RestApiSchema = z
  .object({
    enabled: z.boolean().default(true),
    enableAuthentication: z.boolean().default(true),
    hostnames: z.string().min(1).default('0.0.0.0'),
    port: port.default(8080),
    enableSwagger: z.boolean().default(true),
    enableSwaggerUI: z.boolean().default(true),
    enableUserManagement: z.boolean().default(true),
    enableSchemaManagement: z.boolean().default(true),
    enableInterfaceManagement: z.boolean().default(true),
    enableDestinationManagement: z.boolean().default(true),
    enableCache: z.boolean().default(true),
    cacheLifetime: millis.default(30000),
    cacheCleanup: z.number().int().min(100).default(10000),
    enableWadlEndPoint: z.boolean().default(true),
    inactiveTimeout: z.number().int().min(10000).default(180000),
    maxEventsPerDestination: z.number().int().min(1).max(100000).default(10),
    bodyLimit: z.number().int().min(1024).max(1073741824).default(1048576).describe('largest request body in bytes'),
    sseTokenLifetime: z.number().int().min(1000).default(60000),
    corsHeaders: z.record(z.string(), z.string()).default({}),
  })
  .strict();

export const NetworkManagerSchema = z
  .object({
    data: z.array(z.record(z.string(), z.unknown())).default([]),
  })
  .strict();

export const AuthManagerSchema = z
  .object({
    authenticationEnabled: z.boolean().default(true),
    authorisationEnabled: z.boolean().default(true),
    allowAnonymous: z.boolean().default(false),
    maxFailuresBeforeLock: z.number().int().min(1).default(5),
    initialLockSeconds: z.number().int().min(1).default(30),
    maxLockSeconds: z.number().int().min(1).default(900),
    failureDecaySeconds: z.number().int().default(900),
    minimumPasswordLength: z.number().int().min(1).max(1024).default(12),
    requireUpperCase: z.boolean().default(false),
    requireLowerCase: z.boolean().default(false),
    requireDigit: z.boolean().default(false),
    requireSpecial: z.boolean().default(false),
    requireCurrentPassword: z.boolean().default(true),
  })
  .strict();

export const DestinationManagerSchema = z
  .object({
    queuePrefixes: z.array(z.string().min(1)).default(['queue/', '/queue/']).describe('names starting with one of these are queues'),
    data: z
      .array(
        z
          .object({
            name: z.string().min(1),
            type: z.enum(['Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue']).default('Topic'),
          })
          .strict(),
      )
      .default([]),
    expirySweepInterval: z.number().int().min(100).default(1000),
    restSessionIdleTimeout: z.number().int().min(1000).default(180000),
  })
  .strict();

export const sectionSchemas = {
  MessageDaemon: MessageDaemonSchema,
  RestApi: RestApiSchema,
  NetworkManager: NetworkManagerSchema,
  AuthManager: AuthManagerSchema,
  DestinationManager: DestinationManagerSchema,
} as const;

export type SectionName = keyof typeof sectionSchemas;
export const sectionNames = Object.keys(sectionSchemas) as SectionName[];

/** MAPS display names and class keys accepted by `GET /api/v1/server/config/{name}`. */
export const sectionAliases: Record<string, SectionName> = {
  server: 'MessageDaemon',
  messagedaemonconfig: 'MessageDaemon',
  'rest api': 'RestApi',
  restapimanagerconfig: 'RestApi',
  networks: 'NetworkManager',
  networkmanagerconfig: 'NetworkManager',
  auth: 'AuthManager',
  authmanagerconfig: 'AuthManager',
  destinations: 'DestinationManager',
  destinationmanagerconfig: 'DestinationManager',
};

export type Config = { [K in SectionName]: z.output<(typeof sectionSchemas)[K]> };
export type MessageDaemonConfig = Config['MessageDaemon'];
export type RestApiConfig = Config['RestApi'];
