import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { mintAccessToken } from '../src/auth/tokens.js';
import { seed } from '../src/dev/demo-data.js';
import { expectError, rest, startServer, useServer } from './helpers/app.js';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { parseAnswer } from './helpers/raw-http.js';

/** Rules the documentation states, each held to what a caller or an operator sees. */
describe(`stated rules (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);

  it('JWT_ISSUER and JWT_AUDIENCE: when set, a token must carry both, as configured', async () => {
    const org = await createOrganization(database());
    const own = await startServer(database(), {
      env: { JWT_ISSUER: 'https://auth.example', JWT_AUDIENCE: 'credits-api' },
    });
    try {
      const mint = (claims: { issuer?: string; audience?: string }) =>
        mintAccessToken({
          secret: org.organization.jwtSecret,
          kid: org.parent.publicKey,
          subject: org.parent.id,
          ttlSeconds: 600,
          ...claims,
        });
      expect(
        (
          await rest(own, '/auth/user-profile', {
            token: await mint({ issuer: 'https://auth.example', audience: 'credits-api' }),
          })
        ).status,
      ).toBe(200);
      for (const claims of [
        {},
        { issuer: 'https://auth.example' },
        { audience: 'credits-api' },
        { issuer: 'https://other.example', audience: 'credits-api' },
        { issuer: 'https://auth.example', audience: 'other' },
      ]) {
        expectError(await rest(own, '/auth/user-profile', { token: await mint(claims) }), 401, 'UNAUTHORIZED');
      }
      // Without the settings, the claims are not required.
      expect((await rest(server(), '/auth/user-profile', { token: await mint({}) })).status).toBe(200);
    } finally {
      await own.close();
    }
  });

  it('a request head that never completes is answered 408 REQUEST_TIMEOUT in the envelope', async () => {
    const own = await startServer(database(), { httpTimeouts: { headersMs: 300, checkEveryMs: 100 } });
    try {
      const { port } = new URL(own.url);
      const raw = await new Promise<Buffer>((resolve) => {
        const chunks: Buffer[] = [];
        const socket = connect(Number(port), '127.0.0.1', () =>
          socket.write('GET /auth/user-profile HTTP/1.1\r\nHost: localhost\r\nX-Slow: '),
        );
        socket.on('data', (chunk) => chunks.push(chunk));
        socket.on('close', () => resolve(Buffer.concat(chunks)));
        socket.on('error', () => resolve(Buffer.concat(chunks)));
      });
      const answer = parseAnswer(raw);
      expect(answer.status).toBe(408);
      expect(answer.json).toEqual({
        success: false,
        error: { code: 'REQUEST_TIMEOUT', message: 'The request was not received in time.' },
      });
      expect(answer.header('connection')).toBe('close');
    } finally {
      await own.close();
    }
  });

  it('a bulk change of more than 500 rows in one statement empties the whole cache', async () => {
    const [seeded] = await seed(database(), {
      organizations: 1,
      childrenPerOrganization: 600,
      seed: 9,
      now: new Date(),
    });
    const parentId = seeded!.parent.userID;
    const organization = await database().prisma.organization.findUniqueOrThrow({ where: { parentId } });
    const token = await mintAccessToken({
      secret: organization.jwtSecret,
      kid: seeded!.parent.publicKey,
      subject: parentId,
      ttlSeconds: 600,
    });
    const { cache } = server().app.deps;
    // The seed is itself a bulk change: once the feed has read it, it empties nothing more.
    await cache.caughtUp();
    expect((await rest(server(), '/auth/user-profile', { token })).status).toBe(200);
    expect(cache.size).toBeGreaterThan(0);
    const before = cache.stats.announcements;
    const changed = await database().sql.query<{ id: string }>(
      `UPDATE "Account" SET "signInCount" = "signInCount" + 1 WHERE "parentId" = $1 RETURNING id`,
      [parentId],
    );
    expect(changed.length).toBeGreaterThan(500);
    await cache.caughtUp();
    expect(cache.stats.announcements).toBeGreaterThan(before);
    expect(cache.size).toBe(0);
  });

  it('CACHE_MAX_ENTRIES=0 and CACHE_MAX_BYTES=0 each turn the cache off: answers alike, nothing held', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const expected = (await rest(server(), '/auth/user-profile', { token })).body;
    for (const env of [{ CACHE_MAX_ENTRIES: '0' }, { CACHE_MAX_BYTES: '0' }] as Record<string, string>[]) {
      const own = await startServer(database(), { env });
      try {
        for (let i = 0; i < 3; i++) expect((await rest(own, '/auth/user-profile', { token })).body).toEqual(expected);
        expect(own.app.deps.cache.size, JSON.stringify(env)).toBe(0);
        expect(own.app.deps.cache.stats.hits, JSON.stringify(env)).toBe(0);
      } finally {
        await own.close();
      }
    }
  });

  it("PAGINATION_SECRET is the page tokens' key: a token made under one key is refused under another, taken under the same", async () => {
    const org = await createOrganization(database());
    for (let i = 0; i < 3; i++) await createChild(database(), org.parent);
    const token = await tokenFor(org.parent, org);
    const [a, b, c] = [
      await startServer(database(), { env: { PAGINATION_SECRET: 'a'.repeat(40) } }),
      await startServer(database(), { env: { PAGINATION_SECRET: 'b'.repeat(40) } }),
      await startServer(database(), { env: { PAGINATION_SECRET: 'a'.repeat(40) } }),
    ];
    try {
      const first = await rest(a, '/auth/child-accounts?limit=1', { token });
      const lastKey = first.body.data.data.pagination.nextPageToken as string;
      expect(lastKey).toBeTruthy();
      expect(
        (await rest(c, `/auth/child-accounts?limit=1&lastKey=${encodeURIComponent(lastKey)}`, { token })).status,
      ).toBe(200);
      expectError(
        await rest(b, `/auth/child-accounts?limit=1&lastKey=${encodeURIComponent(lastKey)}`, { token }),
        400,
        'INVALID_PAGINATION_TOKEN',
      );
      // Nor is it the organization's signing secret, which is the key when none is set.
      expectError(
        await rest(server(), `/auth/child-accounts?limit=1&lastKey=${encodeURIComponent(lastKey)}`, { token }),
        400,
        'INVALID_PAGINATION_TOKEN',
      );
    } finally {
      for (const s of [a, b, c]) await s.close();
    }
  });

  it('an unusable account of a depleted organization is ACCOUNT_INACTIVE, not CREDITS_DEPLETED', async () => {
    const depleted = await createOrganization(database(), { organization: { creditBalance: 0 } });
    const inactive = await createChild(database(), depleted.parent, { status: 'inactive' });
    const token = await tokenFor(inactive, depleted);
    for (const path of ['/auth/user-profile', '/auth/organization-details'])
      expectError(await rest(server(), path, { token }), 403, 'ACCOUNT_INACTIVE');
    const answer = await server().graphql('{ me { userID } }', { token });
    expect(answer.errors?.[0]?.extensions?.code).toBe('ACCOUNT_INACTIVE');
  });

  it("every 401 carries WWW-Authenticate: Bearer, and every error answer on the API's paths Cache-Control: no-store", async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const childToken = await tokenFor(child, org);
    const cases: [string, Parameters<typeof rest>[2], number][] = [
      ['/auth/user-profile', {}, 401],
      ['/auth/child-accounts', {}, 401],
      ['/parent/credit-analysis', { token: 'not.a.token' }, 401],
      ['/auth/organization-details', {}, 400],
      ['/auth/child-accounts', { token: childToken }, 401],
      ['/auth/child-accounts?limit=abc', { token: await tokenFor(org.parent, org) }, 400],
    ];
    for (const [target, options, status] of cases) {
      const answer = await rest(server(), target, options);
      expect(answer.status, target).toBe(status);
      expect(answer.headers.get('cache-control'), target).toBe('no-store');
      if (status === 401) expect(answer.headers.get('www-authenticate'), target).toBe('Bearer');
      else expect(answer.headers.get('www-authenticate'), target).toBeNull();
    }
  });

  it('RateLimit-Reset says when the window ends, on allowed answers and on the 429', async () => {
    const own = await startServer(database(), {
      env: { RATE_LIMIT_PER_ADDRESS: '2', RATE_LIMIT_WINDOW_SECONDS: '30' },
    });
    try {
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push(await rest(own, '/auth/user-profile'));
      expect(answers.map((a) => a.status)).toEqual([401, 401, 429]);
      for (const answer of answers) {
        const reset = Number(answer.headers.get('ratelimit-reset'));
        expect(Number.isInteger(reset)).toBe(true);
        expect(reset).toBeGreaterThanOrEqual(1);
        expect(reset).toBeLessThanOrEqual(30);
      }
      expect(Number(answers[2]!.headers.get('retry-after'))).toBeLessThanOrEqual(30);
    } finally {
      await own.close();
    }
  });
});
