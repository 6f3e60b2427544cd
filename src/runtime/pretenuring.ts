import { setFlagsFromString } from 'node:v8';

/**
 * Turns off V8's allocation-site pretenuring for this process (called first thing by `main()`).
 *
 * Pretenuring makes V8 allocate the objects of an allocation site straight into old space once it has seen most of
 * them survive a young-generation collection. On the message path that guess goes wrong: a flood of QoS 1
 * PUBLISHes from one client got the engine's Message objects and their payload views pretenured, although each
 * lives for one read turn, so old space filled with garbage between two mark-compacts: 105-120 MB of RSS for one
 * client, whether it read its PUBACKs or not (test/mqtt/nonreading-memory.test.ts). Without pretenuring they die
 * in the young generation; with the connection's bounded read turns (protocol/mqtt/connection.ts) that client
 * costs a few MB. Objects that do live long (destinations, sessions) are still promoted after surviving two
 * scavenges, which costs a copy each, once.
 *
 * Set at run time, so every way of starting (npm start, the image, the systemd unit, tsx) gets it. Returns false
 * when V8 refused the flag.
 */
export function disablePretenuring(): boolean {
  try {
    setFlagsFromString('--no-allocation-site-pretenuring');
    return true;
  } catch {
    return false;
  }
}
