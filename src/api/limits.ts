/**
 * How long a request's path may be, and so which destination names can be commanded over REST.
 *
 * A destination name may take MQTT's 65 535 UTF-8 bytes [MQTT-4.7.3-3] on every protocol, but over REST a name that
 * is commanded travels percent-encoded in a path (`/api/v1/server/destinations/{destination}`), and the request line
 * counts against the HTTP parser's limit on a request head. That limit stays Node's 16 KiB: it is what each
 * connection may hold while its head arrives (within RestApi.requestTimeout), and the REST server does not cap its
 * connections, so raising it to fit 65 535 bytes percent-encoded (about 211 KiB) would let one client hold 13 times as
 * much memory per connection. Reverse proxies stop earlier still (nginx 8 KiB per header line, Apache 8 190 bytes
 * per request line). So:
 * - the router matches a path parameter of up to MAX_PATH_PARAM characters once decoded: the whole head, so the 431
 *   below answers first and the router's 414 only for what no head can carry;
 * - a request line and headers over MAX_REQUEST_HEAD_BYTES answer 431 with a JSON status naming the limit. Names of up
 *   to about 16 000 ASCII bytes (5 400 bytes of 3-byte characters, 9 characters each percent-encoded) fit; a
 *   destination with a longer name is published to, subscribed to, listed and browsed as any other (names travel in
 *   bodies and query answers there) but cannot be named in a path.
 */
export const MAX_REQUEST_HEAD_BYTES = 16 * 1024;

export const MAX_PATH_PARAM = MAX_REQUEST_HEAD_BYTES;
