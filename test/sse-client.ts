/** A minimal real SSE client over fetch: yields {event, data} as the server sends them. */
export interface SseEvent {
  event: string;
  data: string;
}

export class SseClient {
  readonly events: SseEvent[] = [];
  readonly comments: string[] = [];
  status = 0;
  contentType = '';
  private controller = new AbortController();
  private reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  private closing = false;
  private waiters: Array<() => void> = [];
  done: Promise<void>;

  constructor(url: string, headers: Record<string, string> = {}) {
    let ready!: () => void;
    const started = new Promise<void>((r) => (ready = r));
    this.done = (async () => {
      try {
        const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: this.controller.signal });
        this.status = res.status;
        this.contentType = res.headers.get('content-type') ?? '';
        ready();
        if (!res.body) return;
        const decoder = new TextDecoder();
        let buf = '';
        const reader = res.body.getReader();
        this.reader = reader;
        if (this.closing) await reader.cancel().catch(() => {});
        for (;;) {
          const { done, value: chunk } = await reader.read();
          if (done) break;
          buf += decoder.decode(chunk, { stream: true });
          let idx: number;
          while ((idx = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, idx);
            buf = buf.slice(idx + 2);
            let event = 'message';
            const data: string[] = [];
            let any = false;
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) this.comments.push(line.slice(1).trim());
              else if (line.startsWith('event:')) ((event = line.slice(6).trim()), (any = true));
              else if (line.startsWith('data:')) (data.push(line.slice(5).replace(/^ /, '')), (any = true));
            }
            if (any) this.events.push({ event, data: data.join('\n') });
            for (const w of this.waiters.splice(0)) w();
          }
        }
      } catch (err) {
        // after close(), the connection's end may surface as undici's 'terminated' as well as an AbortError
        if ((err as Error).name !== 'AbortError' && !this.closing) throw err;
      } finally {
        ready();
        for (const w of this.waiters.splice(0)) w();
      }
    })();
    this.started = started;
  }
  started: Promise<void>;

  async waitFor(pred: (events: SseEvent[]) => boolean, timeoutMs = 5000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!pred(this.events)) {
      if (Date.now() > end) throw new Error(`SSE wait timed out; got ${JSON.stringify(this.events)}`);
      await Promise.race([new Promise<void>((r) => this.waiters.push(r)), new Promise((r) => setTimeout(r, 50))]);
    }
  }

  /**
   * Ends the stream as a browser does: the body's reader is cancelled first (undici then closes the socket itself),
   * and the request aborted. Aborting alone, mid-body, could leave an undici promise rejected with 'terminated'
   * and nobody to catch it when the server closed its side at the same moment.
   */
  close(): void {
    this.closing = true;
    void this.reader?.cancel().catch(() => {});
    this.controller.abort();
  }
}
