/**
 * MQTT reason codes (MQTT 5 §2.4) and the 3.1.1 CONNACK return codes, as `as const` objects.
 */
export const Reason = {
  Success: 0x00,
  GrantedQoS1: 0x01,
  GrantedQoS2: 0x02,
  DisconnectWithWill: 0x04,
  NoMatchingSubscribers: 0x10,
  NoSubscriptionExisted: 0x11,
  UnspecifiedError: 0x80,
  MalformedPacket: 0x81,
  ProtocolError: 0x82,
  ImplementationSpecificError: 0x83,
  UnsupportedProtocolVersion: 0x84,
  ClientIdentifierNotValid: 0x85,
  BadUserNameOrPassword: 0x86,
  NotAuthorized: 0x87,
  ServerUnavailable: 0x88,
  ServerBusy: 0x89,
  Banned: 0x8a,
  ServerShuttingDown: 0x8b,
  BadAuthenticationMethod: 0x8c,
  KeepAliveTimeout: 0x8d,
  SessionTakenOver: 0x8e,
  TopicFilterInvalid: 0x8f,
  TopicNameInvalid: 0x90,
  PacketIdentifierInUse: 0x91,
  PacketIdentifierNotFound: 0x92,
  ReceiveMaximumExceeded: 0x93,
  TopicAliasInvalid: 0x94,
  PacketTooLarge: 0x95,
  QuotaExceeded: 0x97,
  AdministrativeAction: 0x98,
  PayloadFormatInvalid: 0x99,
  SharedSubscriptionsNotSupported: 0x9e,
  ConnectionRateExceeded: 0x9f,
  SubscriptionIdentifiersNotSupported: 0xa1,
  WildcardSubscriptionsNotSupported: 0xa2,
} as const;
export type ReasonCode = (typeof Reason)[keyof typeof Reason];

/** MQTT 3.1.1 CONNACK return codes (§3.2.2.3). */
export const ConnackV3 = {
  Accepted: 0,
  UnacceptableProtocolVersion: 1,
  IdentifierRejected: 2,
  ServerUnavailable: 3,
  BadUserNameOrPassword: 4,
  NotAuthorized: 5,
} as const;

/** A protocol violation: the connection is closed with `reason` (v5 DISCONNECT) and counted. */
export class MqttProtocolError extends Error {
  constructor(
    readonly reason: number,
    message: string,
  ) {
    super(message);
    this.name = 'MqttProtocolError';
  }
}

/** Why a connection was closed (kept with it for the REST view, NATS-style). */
export const CloseReason = {
  ClientDisconnect: 'Client disconnected',
  ClientClosed: 'Client closed the connection',
  ProtocolViolation: 'Protocol violation',
  KeepAliveTimeout: 'Keep alive timeout',
  ConnectTimeout: 'No CONNECT in time',
  TakenOver: 'Session taken over',
  AdminClose: 'Closed by an administrator',
  UserDeleted: 'User deleted',
  EndpointStopped: 'Endpoint stopped',
  AuthFailed: 'Authentication failed',
  WriteError: 'Write error',
  QuotaExceeded: 'Publish refused: a subscriber queue is full',
  WriteStalled: 'Outbound buffer stayed full',
  PreAuthLimit: 'Too much data before authentication',
  IdleTimeout: 'Idle (keep alive 0) timeout',
} as const;
