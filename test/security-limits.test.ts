import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { authenticateForOrganization, authenticateJwt, type AuthDependencies } from '../src/auth/authenticate.js';
import { mintAccessToken } from '../src/auth/tokens.js';
import { EntityCache } from '../src/db/entity-cache.js';
import { createLoaders } from '../src/db/loaders.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { rest, startServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

describe(`resource limits (${testMode})`, () => {
  const database = useTestDatabase();

  it('rate limits per address and per credential: 429 with Retry-After and RateLimit headers, no database query', async () => {
    const server = await startServer(database(), {
      env: { RATE_LIMIT_PER_ADDRESS: '30', RATE_LIMIT_PER_CREDENTIAL: '5', RATE_LIMIT_WINDOW_SECONDS: '60' },
    });
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await rest(server, '/auth/user-profile', { token });
        statuses.push(r.status);
        expect(r.headers.get('ratelimit-limit')).toBe('5');
        expect(r.headers.get('ratelimit-remaining')).toBe(String(4 - i));
      }
      expect(statuses).toEqual([200, 200, 200, 200, 200]);
      const before = database().queries.count;
      const limited = await rest(server, '/auth/user-profile', { token });
      expect(database().queries.count).toBe(before);
      expect(limited.status).toBe(429);
      expect(limited.body).toEqual({ success: false, error: { code: 'RATE_LIMITED', message: expect.any(String) } });
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(limited.headers.get('ratelimit-remaining')).toBe('0');
      expect(limited.headers.get('ratelimit-policy')).toBe('5;w=60');
      // Another credential from the same address still passes, until the address runs out.
      const other = await createOrganization(database());
      const otherToken = await tokenFor(other.parent, other);
      expect((await rest(server, '/auth/user-profile', { token: otherToken })).status).toBe(200);
      const gql = await fetch(`${server.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: '{"query":"{ me { userID } }"}',
      });
      expect(gql.status).toBe(429);
      let addressLimited = 0;
      for (let i = 0; i < 30; i++)
        if ((await rest(server, '/auth/organization-details', { publicKey: `APK_x${i}_1` })).status === 429)
          addressLimited++;
      expect(addressLimited).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
  });

  it.skipIf(testMode !== 'postgres')('RATE_LIMIT_STORE=postgres: two instances share one limit', async () => {
    const env = {
      RATE_LIMIT_STORE: 'postgres',
      DATABASE_URL: database().url!,
      RATE_LIMIT_PER_CREDENTIAL: '4',
      RATE_LIMIT_PER_ADDRESS: '0',
    };
    const [a, b] = [await startServer(database(), { env }), await startServer(database(), { env })];
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const statuses = [];
      for (const server of [a, b, a, b, a, b])
        statuses.push((await rest(server, '/auth/user-profile', { token })).status);
      expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
      const rows = await database().sql.query<{ n: number }>('SELECT count(*)::int AS n FROM rate_limit');
      expect(rows[0]!.n).toBeGreaterThan(0);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('2,000 random kids and public keys, refused once, are refused again without a query', async () => {
    const feed = database().changeFeed();
    await feed.started();
    const cache = new EntityCache(
      feed,
      { maxEntries: 150_000, maxBytes: 80 * 1024 * 1024, ttlMs: 600_000 },
      database().sql,
    );
    const deps = (): AuthDependencies => ({
      loaders: createLoaders(database().prisma, cache),
      cache,
      jwt: { maxLifetimeSeconds: 86_400, maxTokenBytes: 4096 },
      now: () => new Date(),
    });
    const kids = Array.from({ length: 2_000 }, (_, i) => `APK_${randomBytes(6).toString('hex')}_${i}`);
    const tokens = await Promise.all(
      kids.map((kid) => mintAccessToken({ secret: 'x'.repeat(40), kid, subject: 'USR_x', ttlSeconds: 60 })),
    );
    const refuse = async (work: () => Promise<unknown>) =>
      expect(work()).rejects.toMatchObject({ code: expect.any(String) });
    for (const key of kids) await refuse(() => authenticateForOrganization({ publicKey: key }, deps()));
    for (const token of tokens) await refuse(() => authenticateJwt({ authorization: `Bearer ${token}` }, deps()));
    const before = database().queries.count;
    for (const key of kids) await refuse(() => authenticateForOrganization({ publicKey: key }, deps()));
    for (const token of tokens) await refuse(() => authenticateJwt({ authorization: `Bearer ${token}` }, deps()));
    expect(database().queries.count - before).toBe(0);
    cache.close();
    await feed.close();
  });

  it('a signing secret shorter than 32 bytes lets no token through', async () => {
    const weak = await createOrganization(database(), { organization: { jwtSecret: 'short-secret' } });
    const server = await startServer(database());
    try {
      const token = await tokenFor(weak.parent, weak);
      const r = await rest(server, '/auth/user-profile', { token });
      expect(r.status).toBe(401);
    } finally {
      await server.close();
    }
  });

  it('JWT_MAX_AGE_SECONDS refuses tokens issued too long ago', async () => {
    const org = await createOrganization(database());
    const server = await startServer(database(), { env: { JWT_MAX_AGE_SECONDS: '60' } });
    try {
      const old = await tokenFor(org.parent, org, { now: new Date(Date.now() - 120_000), ttlSeconds: 3600 });
      const refused = await rest(server, '/auth/user-profile', { token: old });
      expect(refused.status).toBe(401);
      expect(refused.body.error.message).toBe('The access token has expired.');
      expect((await rest(server, '/auth/user-profile', { token: await tokenFor(org.parent, org) })).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it('a token verified once and remembered is refused the same way when it outgrows JWT_MAX_AGE_SECONDS', async () => {
    const org = await createOrganization(database());
    let now = new Date();
    const server = await startServer(database(), { env: { JWT_MAX_AGE_SECONDS: '60' }, now: () => now });
    try {
      const token = await tokenFor(org.parent, org, { now, ttlSeconds: 3600 });
      expect((await rest(server, '/auth/user-profile', { token })).status).toBe(200);
      now = new Date(now.getTime() + 120_000);
      const refused = await rest(server, '/auth/user-profile', { token });
      expect(refused.status).toBe(401);
      expect(refused.body.error.message).toBe('The access token has expired.');
    } finally {
      await server.close();
    }
  });
});
