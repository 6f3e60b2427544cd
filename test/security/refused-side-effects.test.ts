/** A request refused by authentication or authorisation has no effect: the route handler never runs. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { basicAuth, startServer } from '../helpers.js';
import { createUser, leaveEveryone } from './helpers.js';

// With and without an asynchronous onSend hook (CORS headers), which delays the end of the refusal's response.
for (const corsHeaders of [{}, { 'Access-Control-Allow-Origin': '*' }]) {
  test(`a refused publish publishes nothing (CORS headers: ${Object.keys(corsHeaders).length > 0})`, async () => {
    const s = await startServer({ overrides: { RestApi: { corsHeaders } } });
    try {
      const body = { destinationName: 'refused/effect', message: { payload: Buffer.from('x').toString('base64') } };
      const published = () => s.rt.engine!.stats().totalPublishedMessages;
      const before = published();
      const anonymous = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/publish', payload: body });
      assert.equal(anonymous.statusCode, 401);
      // a user in no group lacks connect on the Server, which the messaging routes need
      await leaveEveryone(s, (await createUser(s, 'nobody-special', 'nobody-special-pw')).uuid);
      const forbidden = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/publish', headers: basicAuth('nobody-special', 'nobody-special-pw'), payload: body });
      assert.equal(forbidden.statusCode, 403);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(published(), before, 'no message was published by the refused requests');
      // the same request with rights does publish (the check above can fail)
      const ok = await s.app.inject({ method: 'POST', url: '/api/v1/messaging/publish', headers: s.auth, payload: body });
      assert.equal(ok.statusCode, 200, ok.body);
      assert.equal(published(), before + 1);
    } finally {
      await s.close();
    }
  });
}
