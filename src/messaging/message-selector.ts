import type { Message, Selector } from '../engine/index.js';
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

/** Releases the models of a selector that was never handed to the engine (an error before subscribing) once it is garbage. */
const unreleased = new FinalizationRegistry<() => void>((release) => release());

/**
 * A compiled selector text as an engine subscription selector. It holds the models its model functions use (loaded
 * once per model, shared by every subscription) until the engine calls its `release` (the subscription ended).
 */
export function messageSelector(text: string | null | undefined): Selector | undefined {
  if (text === undefined || text === null) return undefined;
  const compiled = compileSelector(text);
  const selector: Selector = (m) => compiled.matches(selectorView(m));
  if (compiled.calls.length === 0) return selector;
  const release = compiled.acquire();
  const token = {};
  unreleased.register(selector, release, token);
  selector.release = () => {
    unreleased.unregister(token);
    release();
  };
  return selector;
}
