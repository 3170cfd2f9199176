import { describe, expect, it } from 'vitest';
import { createOrganization, tokenFor } from '../helpers/builders.js';
import { expectError, rest, startServer, useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const PATHS = ['/auth/user-profile', '/auth/organization-details', '/auth/child-accounts', '/parent/credit-analysis'];

describe(`REST behaviour common to every path (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database);

  it('an unknown path: 404 NOT_FOUND in the envelope', async () => {
    for (const path of ['/', '/auth', '/auth/user-profile/extra', '/AUTH/USER-PROFILE', '/nope?x=1']) {
      expectError(await rest(server(), path), 404, 'NOT_FOUND');
    }
  });

  it.each(['POST', 'PUT', 'PATCH', 'DELETE'])(
    '%s on a known path: 405 METHOD_NOT_ALLOWED with Allow: GET, HEAD',
    async (method) => {
      for (const path of PATHS) {
        const result = await rest(server(), path, { method });
        expectError(result, 405, 'METHOD_NOT_ALLOWED');
        expect(result.headers.get('allow')).toBe('GET, HEAD');
      }
    },
  );

  it('HEAD answers like GET without a body', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    for (const path of PATHS) {
      const get = await rest(server(), path, { token });
      const head = await rest(server(), path, { token, method: 'HEAD' });
      expect(head.status).toBe(get.status);
      expect(head.text).toBe('');
      expect(head.headers.get('content-type')).toBe(get.headers.get('content-type'));
      // The parent's organization details carry the real secret: no-store, no ETag (http-caching.test.ts).
      expect(head.headers.get('cache-control')).toBe(
        path === '/auth/organization-details' ? 'no-store' : 'private, no-cache',
      );
      expect(head.headers.get('etag')).toBe(get.headers.get('etag'));
    }
    const unauthorized = await rest(server(), '/auth/user-profile', { method: 'HEAD' });
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.text).toBe('');
  });

  it('X-Request-Id: echoed when sane, generated otherwise, on success and error', async () => {
    const echoed = await rest(server(), '/auth/user-profile', { headers: { 'x-request-id': 'abc-123_x.y' } });
    expect(echoed.headers.get('x-request-id')).toBe('abc-123_x.y');
    const generated = await rest(server(), '/nope', { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(generated.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const longId = await rest(server(), '/auth/user-profile', { headers: { 'x-request-id': 'a'.repeat(300) } });
    expect(longId.headers.get('x-request-id')).not.toBe('a'.repeat(300));
    const graphql = await fetch(`${server().url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'gql-1' },
      body: '{"query":"{ __typename }"}',
    });
    expect(graphql.headers.get('x-request-id')).toBe('gql-1');
  });

  it('CORS: any origin by default, preflight answered, no credentials', async () => {
    const simple = await rest(server(), '/auth/user-profile', { headers: { origin: 'https://app.example.org' } });
    expect(simple.headers.get('access-control-allow-origin')).toBe('*');
    expect(simple.headers.get('access-control-allow-credentials')).toBeNull();
    const preflight = await rest(server(), '/auth/child-accounts', {
      method: 'OPTIONS',
      headers: {
        origin: 'https://app.example.org',
        'access-control-request-method': 'GET',
        'access-control-request-headers': 'authorization',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, HEAD');
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
  });

  it('CORS with a configured list: only those origins are allowed', async () => {
    const restricted = await startServer(database(), { env: { CORS_ORIGINS: 'https://a.example, https://b.example' } });
    try {
      const allowed = await rest(restricted, '/auth/user-profile', { headers: { origin: 'https://b.example' } });
      expect(allowed.headers.get('access-control-allow-origin')).toBe('https://b.example');
      const denied = await rest(restricted, '/auth/user-profile', { headers: { origin: 'https://evil.example' } });
      expect(denied.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await restricted.close();
    }
  });

  it('the database unreachable: 503 SERVICE_UNAVAILABLE on every path, quickly', async () => {
    const { openDatabase } = await import('../../src/db/database.js');
    const down = await openDatabase({ url: 'postgres://nobody@127.0.0.1:9/none', connectTimeoutMs: 500 });
    const broken = await startServer(down);
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      for (const path of PATHS) {
        const started = Date.now();
        const result = await rest(broken, path, { token, publicKey: org.parent.publicKey });
        expectError(result, 503, 'SERVICE_UNAVAILABLE');
        // No hang: a closed port refuses at once (milliseconds idle), well before the connect timeout.
        expect(Date.now() - started).toBeLessThan(2000);
      }
      const graphql = await broken.graphql('{ me { userID } }', { token });
      expect(graphql.errors?.[0]?.extensions?.code).toBe('SERVICE_UNAVAILABLE');
    } finally {
      await broken.close();
      await down.close();
    }
  });
});
