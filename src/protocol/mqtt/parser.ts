/**
 * The `mqtt-packet` parser the connections of one broker share (it holds about 1.6 KB, a third of an idle
 * connection's memory), owned by the broker instance. The framer hands it one complete packet at a time and it
 * emits that packet synchronously, so the connection being parsed is known (`parsing`); its protocol version is set
 * before each packet from the connection's CONNECT (which connections read with `decodeConnect`, then `settingsFor`;
 * a CONNECT parsed here sets them the same way). After any throw (a malformed
 * packet, or a handler's protocol error) the parser's state is mid-packet, so it is dropped and the next packet gets
 * a fresh one. A nested parse (not expected: handlers do not parse) gets a parser of its own.
 */
import { newParser } from './codec.js';
import { MqttProtocolError, Reason } from './reason.js';

export interface ParserSettings {
  protocolVersion: number;
  bridgeMode?: boolean;
}

/** What the parser needs of the connection whose packet it reads. */
export interface ParseTarget {
  /** The packet type being parsed, for the error message of a malformed one. */
  readonly parsingType: string;
  /** How this connection's packets are read: protocol version (and bridge mode) of its CONNECT. */
  parserSettings: ParserSettings | undefined;
  /** The packet, as mqtt-packet gives it. */
  onPacket(p: Record<string, unknown>): void;
}

/** Settings per protocol level (shared, never changed: the parser replaces its settings object on CONNECT). */
const SETTINGS: Readonly<Record<number, Readonly<ParserSettings>>> = Object.freeze({
  3: Object.freeze({ protocolVersion: 3 }),
  4: Object.freeze({ protocolVersion: 4 }),
  5: Object.freeze({ protocolVersion: 5 }),
});

/** How the shared parser reads the packets after a CONNECT of protocol level `level` (3, 4, 5), bridge mode or not. */
export function settingsFor(level: number, bridgeMode: boolean): ParserSettings {
  return bridgeMode ? { protocolVersion: level, bridgeMode: true } : (SETTINGS[level] ?? SETTINGS[4]!);
}

type Parser = ReturnType<typeof newParser>;

export class PacketParser {
  private shared: Parser | undefined = undefined;
  private parsing: ParseTarget | undefined = undefined;

  private make(): Parser {
    const parser = newParser();
    parser.on('packet', (p) => this.parsing!.onPacket(p as unknown as Record<string, unknown>));
    parser.on('error', (err: Error) => {
      throw new MqttProtocolError(Reason.MalformedPacket, `malformed ${this.parsing!.parsingType}: ${err.message}`);
    });
    return parser;
  }

  /** Parse one complete frame of `conn`; the packet goes to `conn.onPacket` before this returns. */
  parse(conn: ParseTarget, frame: Buffer): void {
    const nested = this.parsing !== undefined;
    const parser = nested ? this.make() : (this.shared ??= this.make());
    const outer = this.parsing;
    this.parsing = conn;
    const p = parser as unknown as { settings: ParserSettings };
    p.settings = conn.parserSettings ?? SETTINGS[4]!;
    try {
      parser.parse(frame);
      if (p.settings !== conn.parserSettings) {
        // a CONNECT was read (connections hand theirs to `decodeConnect`, so only a direct caller, e.g. the fuzz
        // targets): the parser took its protocol version (and 3.1.1 bridge mode) from it
        const st = p.settings;
        conn.parserSettings = settingsFor(st.protocolVersion ?? 4, st.bridgeMode === true);
      }
    } catch (err) {
      if (!nested) this.shared = undefined;
      throw err;
    } finally {
      this.parsing = outer;
    }
  }
}
