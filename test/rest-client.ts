import type { FastifyInstance, LightMyRequestResponse } from 'fastify';

/** One REST caller over `app.inject()`: keeps the cookies the server sets (its session) and sends extra headers. */
export class RestClient {
  readonly cookies: Record<string, string> = {};
  constructor(
    private readonly app: FastifyInstance,
    private readonly headers: Record<string, string> = {},
  ) {}

  private keep(r: LightMyRequestResponse): LightMyRequestResponse {
    for (const c of r.cookies as Array<{ name: string; value: string }>) this.cookies[c.name] = c.value;
    return r;
  }

  async get(url: string): Promise<LightMyRequestResponse> {
    return this.keep(await this.app.inject({ method: 'GET', url, headers: this.headers, cookies: this.cookies }));
  }

  async post(url: string, payload?: unknown): Promise<LightMyRequestResponse> {
    return this.keep(
      await this.app.inject({
        method: 'POST',
        url,
        headers: this.headers,
        cookies: this.cookies,
        ...(payload === undefined ? {} : { payload: payload as object }),
      }),
    );
  }
}

export const b64 = (s: string) => Buffer.from(s).toString('base64');
export const unb64 = (s: string) => Buffer.from(s, 'base64').toString('utf8');
