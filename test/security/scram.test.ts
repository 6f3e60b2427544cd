import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pbkdf2Sync } from 'node:crypto';
import { keysOf, parseClientFirst, ScramError, ScramServer, scramCredentials, saslPrep } from '../../src/security/scram.js';

/** SCRAM-SHA-256 server side against the example exchange of RFC 7677 §3 (user "user", password "pencil"). */
describe('SCRAM-SHA-256', () => {
  const clientFirst = 'n,,n=user,r=rOprNGfwEbeRWgbNEkqO';
  const serverNonce = '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0';
  const salt = Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64');
  const clientFinal = 'c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=';

  test('the RFC 7677 example: server-first-message and server-final-message as in the RFC', async () => {
    const creds = await scramCredentials('pencil', 4096, salt);
    const server = new ScramServer(parseClientFirst(clientFirst), creds, serverNonce);
    assert.equal(server.serverFirst, 'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096');
    assert.equal(server.finish(clientFinal), 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=');
  });

  test('stored credentials are StoredKey and ServerKey of PBKDF2-HMAC-SHA-256, not the password', async () => {
    const creds = await scramCredentials('pencil', 4096, salt);
    const keys = keysOf(pbkdf2Sync('pencil', salt, 4096, 32, 'sha256'));
    assert.deepEqual(creds, { salt: salt.toString('base64'), iterations: 4096, storedKey: keys.storedKey.toString('base64'), serverKey: keys.serverKey.toString('base64') });
    assert.ok(!JSON.stringify(creds).includes('pencil'));
  });

  test('a wrong proof, a wrong nonce or a wrong channel binding is refused', async () => {
    const creds = await scramCredentials('another password', 4096, salt);
    const wrongPassword = new ScramServer(parseClientFirst(clientFirst), creds, serverNonce);
    assert.throws(() => wrongPassword.finish(clientFinal), (e: ScramError) => e.code === 'invalid-proof');
    const right = await scramCredentials('pencil', 4096, salt);
    assert.throws(() => new ScramServer(parseClientFirst(clientFirst), right, 'other-nonce').finish(clientFinal), (e: ScramError) => e.code === 'other-error');
    assert.throws(() => new ScramServer(parseClientFirst(clientFirst), right, serverNonce).finish(clientFinal.replace('c=biws', 'c=eSws')), (e: ScramError) => e.code === 'channel-bindings-dont-match');
    const once = new ScramServer(parseClientFirst(clientFirst), right, serverNonce);
    once.finish(clientFinal);
    assert.throws(() => once.finish(clientFinal), 'a proof is accepted once');
  });

  test('client-first-message parsing: escaped names, channel binding and malformed messages', () => {
    assert.equal(parseClientFirst('n,,n=a=2Cb=3Dc,r=abc').username, 'a,b=c');
    assert.equal(parseClientFirst('y,,n=u,r=abc').gs2Header, 'y,,');
    assert.throws(() => parseClientFirst('p=tls-unique,,n=u,r=abc'), (e: ScramError) => e.code === 'channel-binding-not-supported');
    assert.throws(() => parseClientFirst('n,,n=u=41,r=abc'), (e: ScramError) => e.code === 'invalid-username-encoding');
    assert.throws(() => parseClientFirst('n,,m=x,n=u,r=abc'), (e: ScramError) => e.code === 'extensions-not-supported');
    assert.throws(() => parseClientFirst('n=u,r=abc'));
    assert.throws(() => parseClientFirst(''));
    assert.throws(() => parseClientFirst('n,a=other,n=u,r=abc'), 'another authorization identity');
  });

  test('SASLprep maps non-ASCII spaces and normalises with NFKC', () => {
    assert.equal(saslPrep('I\u00adX'), 'IX');
    assert.equal(saslPrep('a\u00a0b'), 'a b');
    assert.equal(saslPrep('\u2168'), 'IX');
    assert.equal(saslPrep('plain-ascii'), 'plain-ascii');
  });
});
