/**
 * The security contract every protocol and route uses. The runtime holds one `SecurityService`; until
 * authentication is configured on, it is `openSecurity` (everyone is the anonymous principal, everything allowed).
 */

/** Server-scope permission wire names (reference section 8, bit < 32), lowercase. */
export const ServerPermissions = [
  'connect',
  'persistent_session',
  'create_destination',
  'purge_server',
  'list_destinations',
  'manage_destinations',
  'view_stats',
  'view_config',
  'manage_config',
  'manage_authentication',
  'manage_authorization',
  'rest_api_access',
  'manage_interfaces',
  'manage_protocols',
  'wildcard_subscription',
] as const;

/** Destination-scope permission wire names (bit >= 32). */
export const DestinationPermissions = ['publish', 'subscribe', 'schema_subscribe', 'schema_publish', 'retain', 'delete', 'durable', 'purge', 'view'] as const;

/**
 * Model-scope permissions (Switchyard, not in MAPS), on the `Model` resource (key: the model name, `*` all models):
 * `use_model` calls the model in a selector (subscriptions, SSE, list filters); `train_model` creates or changes it
 * (upload, delete, online training by a selector that names a model not in the store).
 */
export const ModelPermissions = ['use_model', 'train_model'] as const;

/** Permission wire names (reference section 8), lowercase. */
export const Permissions = [...ServerPermissions, ...DestinationPermissions, ...ModelPermissions] as const;
export type Permission = (typeof Permissions)[number];

export const ResourceTypes = ['Server', 'Topic', 'Queue', 'TemporaryTopic', 'TemporaryQueue', 'Schema', 'Metrics', 'Model'] as const;
export type ResourceType = (typeof ResourceTypes)[number];

export interface Principal {
  username: string;
  /** User UUID. */
  uniqueId: string;
  /** Group UUIDs in membership order. */
  groups: string[];
  anonymous: boolean;
}

export interface AuthContext {
  /** The client's real address (from a trusted proxy's header or the PROXY protocol where configured). */
  clientAddress?: string;
  /** 'REST', 'MQTT', ... */
  protocol: string;
  /** The address came through a proxy (or a forwarding header was seen): no lockout exemption applies to it. */
  proxied?: boolean;
  /** Fires when the caller went away (socket closed, request aborted): a password check not yet started is dropped. */
  signal?: AbortSignal;
}

/** Bad credentials or a locked account (`retryAfterSeconds` set when locked). */
export class AuthenticationFailedError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'AuthenticationFailedError';
  }
}

/**
 * One enhanced-authentication (SASL-style) exchange in two steps, as SCRAM-SHA-256 needs: `challenge` answers the
 * client's first message; `finish` checks the client's answer and returns the principal and the server's last
 * message, or throws AuthenticationFailedError (counted as a failed login where a password guess was wrong).
 */
export interface AuthExchange {
  readonly method: string;
  /** The user the client named. */
  readonly username: string;
  readonly challenge: Buffer;
  finish(response: Buffer): { principal: Principal; outcome: Buffer };
  /** Resolves once a failure `finish` recorded (lockout state) is in the store: answer the client after it. */
  recorded?(): Promise<void>;
}

export interface SecurityService {
  /** True when credentials are checked at all. */
  readonly enabled: boolean;
  /** Enhanced authentication methods offered (MQTT 5 AUTH), e.g. ['SCRAM-SHA-256']; none when absent. */
  readonly authenticationMethods?: readonly string[];
  /** Starts an exchange with the client's first message; throws AuthenticationFailedError (locked, malformed). */
  startExchange?(method: string, initial: Buffer | undefined, ctx: AuthContext): AuthExchange;
  /** Checks a username and password; no username → the anonymous principal when anonymous access is on. Throws AuthenticationFailedError. */
  authenticate(username: string | undefined, password: string | Buffer | undefined, ctx: AuthContext): Promise<Principal>;
  /** The ACL decision; cheap (cached), synchronous, safe on a per-connection path (not per message where avoidable). */
  isAllowed(principal: Principal, permission: Permission, resourceType: ResourceType, resourceKey: string): boolean;
  /**
   * Delivery-side authorisation: a check `subscribe` on each delivered topic or queue for `who` (its uniqueId, or
   * its username when only that is known, e.g. a restored MQTT session), for the engine subscription's `authorize`
   * hook. Decisions are cached per topic and follow ACL, group and membership changes at once; the same function is
   * returned for the same user (the engine asks it once per route for all of that user's subscriptions). Undefined
   * (no hook, no cost) when every delivery is allowed.
   */
  deliveryAuthorizer?(who: { uniqueId?: string; username?: string }): DeliveryAuthorizer | undefined;
  /** The audit log (absent when security is off): `denied` lines are rate-limited. */
  readonly audit?: {
    event(event: string, fields: Record<string, unknown>, msg: string): void;
    denied(fields: Record<string, unknown>, msg: string): void;
  };
}

/** May a subscription receive a message published to `destinationName`? (The engine's `Subscription.authorize`.) */
export type DeliveryAuthorizer = (destinationName: string) => boolean;

/** Runtime event emitted (synchronously) when a user is deleted. */
export const USER_DELETED = 'user.deleted';

declare module '../runtime/events.js' {
  interface RuntimeEvents {
    /** A user was deleted (USER_DELETED): listeners end what it had open and count it into `ended`. */
    'user.deleted': [deletion: UserDeletion];
  }
}

declare module '../runtime/runtime.js' {
  /** `rt.security` is a SecurityService: the kernel only holds it. */
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  interface RuntimeSecurity extends SecurityService {}
}

/**
 * Payload of `USER_DELETED`: listeners end what the user had open (MQTT connections and sessions, REST messaging
 * sessions) and add what they ended to `ended`, which goes into the `user.deleted` audit line.
 */
export interface UserDeletion {
  uniqueId: string;
  username: string;
  /** Login sessions (ids) that were ended. */
  loginSessions: string[];
  ended: Record<string, number>;
}

export const ANONYMOUS: Principal = Object.freeze({ username: 'anonymous', uniqueId: '00000000-0000-0000-0000-000000000000', groups: [], anonymous: true });

/** Authentication off: everyone is anonymous and everything is allowed. */
export const openSecurity: SecurityService = {
  enabled: false,
  async authenticate(username) {
    return username ? { ...ANONYMOUS, username, anonymous: false } : ANONYMOUS;
  },
  isAllowed() {
    return true;
  },
};

/**
 * What a REST route needs, declared in the route's `config.permission` (e.g. `{ permission: 'view_stats' }` on the
 * Server resource). Routes without a declaration need `rest_api_access` on Server; `config.public: true` marks the
 * few open routes. The declaration also appears in the OpenAPI document as `x-required-permission`.
 */
export interface RoutePermission {
  permission: Permission;
  resourceType?: ResourceType;
}
declare module 'fastify' {
  interface FastifyContextConfig {
    permission?: RoutePermission;
    public?: boolean;
  }
}
