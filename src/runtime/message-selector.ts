import type { Message } from '../engine/index.js';
import { compileSelector } from '../engine/selector/selector.js';

/**
 * What a subscription selector sees of a message: the dataMap entries and metaData entries as properties (JMS
 * message properties), plus the header fields under their MAPS names (priority, qualityOfService, contentType,
 * expiry, creation, identifier, destinationName, retain); `dataMap.x` / `metaData.x` reach a field explicitly.
 */
export function selectorView(msg: Message & { destinationName: string }): Record<string, unknown> {
  return {
    ...msg.metaData,
    ...msg.dataMap,
    identifier: msg.id,
    priority: msg.priority,
    qualityOfService: msg.qos,
    contentType: msg.contentType,
    expiry: msg.expiresAt > 0 ? msg.expiresAt - msg.creation : -1,
    creation: msg.creation,
    retain: msg.retain,
    destinationName: msg.destinationName,
    dataMap: msg.dataMap,
    metaData: msg.metaData,
  };
}

/** A compiled selector text as an engine subscription selector. */
export function messageSelector(text: string | null | undefined): ((m: Message & { destinationName: string }) => boolean) | undefined {
  if (text === undefined || text === null) return undefined;
  const compiled = compileSelector(text);
  return (m) => compiled.matches(selectorView(m));
}
