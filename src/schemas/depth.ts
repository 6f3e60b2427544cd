/**
 * Nesting depth of a payload, measured before it is decoded or validated: one pass over the bytes, iterative (no
 * recursion, no allocation per level), stopping as soon as the limit is passed. A decoder or validator that recurses
 * per level (ajv on a recursive schema, cbor-x) would otherwise overflow its stack on a deeply nested payload, and
 * decoding it at all is slow: 40 000 nested MessagePack maps (120 KB) took @msgpack/msgpack about 140 ms.
 *
 * Each scanner answers only "deeper than max?": a payload it cannot read to the end (truncated, malformed) is left
 * to the decoder, which reports it.
 */

/** True when JSON text nests arrays/objects deeper than `max` (strings skipped). */
export function jsonNestingExceeds(t: string, max: number): boolean {
  let depth = 0;
  const n = t.length;
  for (let i = 0; i < n; i++) {
    const c = t.charCodeAt(i);
    if (c === 34) {
      // a string: on to its closing quote
      for (i++; i < n; i++) {
        const d = t.charCodeAt(i);
        if (d === 92) i++;
        else if (d === 34) break;
      }
    } else if (c === 91 || c === 123) {
      if (++depth > max) return true;
    } else if (c === 93 || c === 125) depth--;
  }
  return false;
}

/**
 * Containers still open while scanning: the number of items each still holds (Infinity for CBOR's indefinite
 * length, closed by a break). `open(n)` enters a container of n items, `item()` counts one item as read.
 */
class Nesting {
  private readonly left: number[] = [];
  constructor(private readonly max: number) {}

  /** Enters a container of `n` items; true when that passes the limit. */
  open(n: number): boolean {
    if (n === 0) {
      this.item();
      return false;
    }
    this.left.push(n);
    return this.left.length > this.max;
  }

  /** One item (a scalar or a container just closed) was read. */
  item(): void {
    const l = this.left;
    while (l.length > 0) {
      const top = l.length - 1;
      if (--l[top]! > 0) return;
      l.pop(); // that container is complete: it counts as one item of its parent
    }
  }

  /** A CBOR break: the innermost (indefinite) container ends. */
  close(): void {
    this.left.pop();
    this.item();
  }
}

/** True when a MessagePack value nests arrays/maps deeper than `max`. */
export function msgpackNestingExceeds(b: Uint8Array, max: number): boolean {
  const nest = new Nesting(max);
  const n = b.length;
  const uint = (at: number, size: number): number => {
    let v = 0;
    for (let k = 0; k < size; k++) v = v * 256 + (b[at + k] ?? 0);
    return v;
  };
  let i = 0;
  while (i < n) {
    const t = b[i++]!;
    if (t <= 0x7f || t >= 0xe0 || t === 0xc0 || t === 0xc2 || t === 0xc3) nest.item();
    else if (t <= 0x8f) {
      if (nest.open(2 * (t & 0x0f))) return true;
    } else if (t <= 0x9f) {
      if (nest.open(t & 0x0f)) return true;
    } else if (t <= 0xbf) {
      i += t & 0x1f;
      nest.item();
    } else {
      switch (t) {
        case 0xc4:
        case 0xc5:
        case 0xc6:
        case 0xd9:
        case 0xda:
        case 0xdb: {
          const size = t === 0xc4 || t === 0xd9 ? 1 : t === 0xc5 || t === 0xda ? 2 : 4;
          i += size + uint(i, size);
          nest.item();
          break;
        }
        case 0xc7:
        case 0xc8:
        case 0xc9: {
          const size = t === 0xc7 ? 1 : t === 0xc8 ? 2 : 4;
          i += size + 1 + uint(i, size);
          nest.item();
          break;
        }
        case 0xca:
        case 0xcb:
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf:
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3:
          i += { 0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8 }[t]!;
          nest.item();
          break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8:
          i += 1 + (1 << (t - 0xd4));
          nest.item();
          break;
        case 0xdc:
        case 0xdd: {
          const size = t === 0xdc ? 2 : 4;
          const count = uint(i, size);
          i += size;
          if (nest.open(count)) return true;
          break;
        }
        case 0xde:
        case 0xdf: {
          const size = t === 0xde ? 2 : 4;
          const count = uint(i, size);
          i += size;
          if (nest.open(2 * count)) return true;
          break;
        }
        default:
          return false; // 0xc1: never used; the decoder reports it
      }
    }
  }
  return false;
}

/** True when a CBOR item nests arrays/maps/tags (and indefinite strings) deeper than `max`. */
export function cborNestingExceeds(b: Uint8Array, max: number): boolean {
  const nest = new Nesting(max);
  const n = b.length;
  let i = 0;
  while (i < n) {
    const ib = b[i++]!;
    const major = ib >> 5;
    const ai = ib & 0x1f;
    let arg = ai;
    if (ai === 24 || ai === 25 || ai === 26 || ai === 27) {
      const size = 1 << (ai - 24);
      arg = 0;
      for (let k = 0; k < size; k++) arg = arg * 256 + (b[i + k] ?? 0);
      i += size;
    } else if (ai >= 28 && ai <= 30) return false; // malformed: the decoder reports it
    const indefinite = ai === 31;
    switch (major) {
      case 0:
      case 1:
        nest.item();
        break;
      case 2:
      case 3:
        if (indefinite) {
          if (nest.open(Infinity)) return true;
        } else {
          i += arg;
          nest.item();
        }
        break;
      case 4:
        if (nest.open(indefinite ? Infinity : arg)) return true;
        break;
      case 5:
        if (nest.open(indefinite ? Infinity : 2 * arg)) return true;
        break;
      case 6:
        if (nest.open(1)) return true; // a tag wraps one item
        break;
      default:
        if (indefinite) nest.close();
        else nest.item();
    }
  }
  return false;
}

/** True when a decoded value (arrays, plain objects, Maps) nests deeper than `max`. */
export function valueNestingExceeds(value: unknown, max: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (d > max) return true;
    const children = Array.isArray(v) ? v : v instanceof Map ? [...v.values()] : ArrayBuffer.isView(v) ? [] : Object.values(v as object);
    for (const c of children) if (c !== null && typeof c === 'object') stack.push([c, d + 1]);
  }
  return false;
}
