import { MAX_TOPIC_BYTES } from '../engine/index.js';

/**
 * How long a request's path may be, so that every destination the broker accepts can be commanded over REST.
 *
 * A destination name may take MQTT's 65 535 UTF-8 bytes [MQTT-4.7.3-3] (the conformance suite publishes to a
 * 60 000-byte topic) and the REST API names it in a path (`/api/v1/server/destinations/{destination}`), so:
 * - the router matches a path parameter of up to MAX_PATH_PARAM characters once decoded (a name of 65 535 bytes is at
 *   most 65 535 UTF-16 units), plus 1 KiB for what is put in front of a name: an actor id (`destination:<name>`) or a
 *   subscription key's session id. Longer ones answer 414 with a JSON status; find-my-way's cost is linear in it;
 * - Node's HTTP parser takes a request line and headers of up to MAX_REQUEST_HEAD_BYTES: the parameter
 *   percent-encoded (3 characters per byte at most) plus Node's default 16 KiB for the rest. Longer ones answer 431.
 *   A connection holds at most that much while its head arrives (within RestApi.requestTimeout).
 */
export const MAX_PATH_PARAM = MAX_TOPIC_BYTES + 1024;

export const MAX_REQUEST_HEAD_BYTES = 3 * MAX_PATH_PARAM + 16 * 1024;
