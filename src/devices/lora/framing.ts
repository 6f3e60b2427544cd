/**
 * The node framing carried in raw LoRa packets (the RadioHead RH_RF95 layout, so RadioHead nodes speak it as they
 * are): a 4-byte header, then the payload.
 *
 *   byte 0  to        destination node id (255 = broadcast)
 *   byte 1  from      source node id
 *   byte 2  id        packet id: the sender counts 0, 1, ... 255, 0, ... (one counter per sender)
 *   byte 3  flags     0x80 ACK, 0x40 RETRY (a retransmission of the packet with the same id); the low 4 bits are the
 *                     application's and are passed through
 *   4..     payload   at most 251 bytes (the RN2483 sends at most 255 bytes in one packet)
 *
 * Pure functions, no I/O.
 */
export const BROADCAST = 255;
export const HEADER_LENGTH = 4;
export const MAX_PACKET = 255;
export const MAX_PAYLOAD = MAX_PACKET - HEADER_LENGTH;
export const Flags = { Ack: 0x80, Retry: 0x40 } as const;

export interface Frame {
  to: number;
  from: number;
  id: number;
  flags: number;
  payload: Buffer;
}

/** A frame, or undefined when the packet is too short to carry the header. */
export function decodeFrame(packet: Buffer): Frame | undefined {
  if (packet.length < HEADER_LENGTH) return undefined;
  return { to: packet[0]!, from: packet[1]!, id: packet[2]!, flags: packet[3]!, payload: packet.subarray(HEADER_LENGTH) };
}

export function encodeFrame(f: Frame): Buffer {
  if (f.payload.length > MAX_PAYLOAD) throw new RangeError(`a LoRa payload is at most ${MAX_PAYLOAD} bytes, got ${f.payload.length}`);
  const out = Buffer.allocUnsafe(HEADER_LENGTH + f.payload.length);
  out[0] = f.to & 0xff;
  out[1] = f.from & 0xff;
  out[2] = f.id & 0xff;
  out[3] = f.flags & 0xff;
  f.payload.copy(out, HEADER_LENGTH);
  return out;
}

/**
 * What a packet id says after the previous one from the same node: `duplicate` (the same id again: a retransmission
 * whose first copy arrived), or the number of packets missed in between (0 for the next id), modulo 256.
 */
export function packetGap(lastId: number | undefined, id: number): { duplicate: boolean; missed: number } {
  if (lastId === undefined) return { duplicate: false, missed: 0 };
  if (id === lastId) return { duplicate: true, missed: 0 };
  return { duplicate: false, missed: (id - lastId - 1 + 256) % 256 };
}
