/** Public surface of the messaging engine. */
export { DEFAULT_MAX_BYTES, Engine, QUOTA_EXCEEDED, RESOLVED as PUBLISHED } from './engine.js';
export type { DurableChange, EngineEvents, EngineOptions, PublishOptions } from './engine.js';
export type { DestinationDTO, EngineStats } from './views.js';
export type { RecoveryResult } from './recovery.js';
export { DestinationType, isQueueName, isQueueType, isTemporaryType } from './destination.js';
export type { Delivery, PullSink, PushSink, Selector, Sink, SubscribeOptions, SubscriptionQueueDTO, SubscriptionStateDTO } from './subscription.js';
export { MESSAGE_OVERHEAD_BYTES, Subscription, messageBytes } from './subscription.js';
export type { Message, MessageInit, QoS } from './message.js';
export { DEFAULT_PRIORITY, MAX_PRIORITY, MessageIdGenerator, clampPriority, createMessage, decodeMessage, encodeMessage } from './message.js';
export type { EngineStore, MemoryEngineStore, StoreOp } from './engine-store.js';
export { levelEngineStore, memoryEngineStore } from './engine-store.js';
export {
  MAX_TOPIC_BYTES,
  TopicTree,
  TopicTrie,
  hasWildcard,
  parseSharedFilter,
  splitTopic,
  topicMatchesFilter,
  validateTopicFilter,
  validateTopicName,
} from './topic-trie.js';
export { GroupCommit } from './group-commit.js';
export { DestinationCounters, RateMeter, ServerTotals, StoreTimings } from './counters.js';
