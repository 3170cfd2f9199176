import { SignJWT } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { secretKey } from '../src/domain/signing-keys.js';
import { loadConfig } from '../src/config.js';
import { parseDateBound } from '../src/domain/dates.js';
import { RateLimiter } from '../src/http/rate-limit.js';
import { queryParameters } from '../src/rest/http.js';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { expectError, metricValue, rest, startServer, useServer } from './helpers/app.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { rawRequest, strictGet } from './helpers/raw-http.js';

/*
 * One request or one organization must not degrade the service for the others: bounded parsing,
 * bounded memory, exact framing, canonical credentials and page tokens, exact paths and dates.
 */

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** The same base64url text with its last character's unused bits changed (same bytes for a lenient decoder). */
function flipUnusedBits(segment: string): string {
  return `${segment.slice(0, -1)}${B64URL[B64URL.indexOf(segment.at(-1)!) ^ 1]}`;
}

/** A valid token of the organization's parent, made as long as wanted with a padding claim. */
function paddedToken(org: BuiltOrganization, pad: string): Promise<string> {
  return new SignJWT({ pad })
    .setProtectedHeader({ alg: 'HS256', kid: org.parent.publicKey })
    .setSubject(org.parent.id)
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(secretKey(org.organization.jwtSecret));
}

/** Captures what the process logs (one JSON line per event on stderr). */
function captureLogs(): { lines: () => Record<string, unknown>[]; restore: () => void } {
  const seen: string[] = [];
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    seen.push(String(chunk));
    return true;
  });
  return {
    lines: () =>
      seen.flatMap((text) =>
        text
          .split('\n')
          .filter(Boolean)
          .map((line) => {
            try {
              return JSON.parse(line) as Record<string, unknown>;
            } catch {
              return { raw: line };
            }
          }),
      ),
    restore: () => spy.mockRestore(),
  };
}

function expectEnvelope(answer: { status: number; json: any; body: string }, status: number, code: string) {
  expect(answer.status, answer.body).toBe(status);
  expect(answer.json).toEqual({ success: false, error: { code, message: expect.any(String) } });
}

describe(`hostile input (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { LOG_LEVEL: 'warn', CACHE_MAX_BYTES: String(1024 * 1024) } });
  let logs: ReturnType<typeof captureLogs> | undefined;
  afterEach(() => {
    logs?.restore();
    logs = undefined;
  });

  describe('request heads and query strings are bounded before any work', () => {
    it('reads at most MAX_QUERY_PARAMETERS parameters, in time linear in the input', () => {
      const repeated = 'search=a&'.repeat(40_000);
      const parsed = queryParameters(repeated, 100);
      expect(parsed.get('search')).toHaveLength(100);
      // A parameter past the bound is ignored, not read.
      expect(queryParameters(`${'x=1&'.repeat(100)}limit=0`, 100).has('limit')).toBe(false);
      expect(queryParameters(`${'x=1&'.repeat(99)}limit=0`, 100).get('limit')).toEqual(['0']);
    });

    it('a request target over MAX_URL_BYTES is 414 URI_TOO_LONG in the envelope, over the head bound too', async () => {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const long = await rest(server(), `/auth/child-accounts?${'search=a&'.repeat(1000)}`, { token });
      expectError(long, 414, 'URI_TOO_LONG');
      // 40,000 repeats (360 KB) is past the whole head's bound: refused by the parser, same answer.
      const huge = await rawRequest(
        server().url,
        `GET /auth/child-accounts?${'search=a&'.repeat(40_000)} HTTP/1.1\r\nHost: localhost\r\nConnection: close`,
      );
      expectEnvelope(huge, 414, 'URI_TOO_LONG');
      // Just under the bound the path's own rules apply: a repeated search is INVALID_SEARCH.
      expectError(
        await rest(server(), `/auth/child-accounts?${'search=a&'.repeat(800)}`, { token }),
        400,
        'INVALID_SEARCH',
      );
    });

    it('too many header fields, or a head over MAX_HEAD_BYTES, is 431; a token over MAX_TOKEN_BYTES is 401 with no query', async () => {
      const headers = Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`x-h${i}`, 'v']));
      expectError(await rest(server(), '/auth/user-profile', { headers }), 431, 'REQUEST_HEADER_FIELDS_TOO_LARGE');
      // Each header under MAX_HEADER_BYTES, together over the head's 32 KiB.
      const wide = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`x-w${i}`, 'v'.repeat(7000)]));
      expectError(
        await rest(server(), '/auth/user-profile', { headers: wide }),
        431,
        'REQUEST_HEADER_FIELDS_TOO_LARGE',
      );

      const org = await createOrganization(database());
      const padded = (bytes: number) => paddedToken(org, 'p'.repeat(bytes));
      const fits = await padded(2800);
      expect(fits.length).toBeLessThanOrEqual(4096);
      expect((await rest(server(), '/auth/user-profile', { token: fits })).status).toBe(200);
      const tooLong = await padded(3200);
      expect(tooLong.length).toBeGreaterThan(4096);
      const before = database().queries.count;
      expectError(await rest(server(), '/auth/user-profile', { token: tooLong }), 401, 'UNAUTHORIZED');
      expect(database().queries.count).toBe(before);
    });

    it('a head Node cannot parse is 400 BAD_REQUEST in the envelope, and the connection closes', async () => {
      const answer = await rawRequest(server().url, 'GARBAGE\r\nNot a header line');
      expectEnvelope(answer, 400, 'BAD_REQUEST');
      expect(answer.header('connection')).toBe('close');
    });

    it('GET /graphql obeys MAX_BODY_BYTES like a POSTed body, answered as GraphQL errors', async () => {
      const small = await startServer(database(), { env: { MAX_BODY_BYTES: '1024' } });
      try {
        const query = encodeURIComponent(`{ __typename ${'__typename '.repeat(150)}}`);
        expect(query.length).toBeGreaterThan(1024);
        const response = await fetch(`${small.url}/graphql?query=${query}`, {
          headers: { accept: 'application/json' },
        });
        expect(response.status).toBe(413);
        expect(await response.json()).toEqual({
          errors: [{ message: expect.any(String), extensions: { code: 'PAYLOAD_TOO_LARGE' } }],
        });
      } finally {
        await small.close();
      }
    });
  });

  describe('one tenant cannot exhaust the memory', () => {
    it('thousands of large valid tokens of one organization: the cache stays within CACHE_MAX_BYTES, another organization keeps being served', async () => {
      const flooder = await createOrganization(database());
      const bystander = await createOrganization(database());
      const bystanderToken = await tokenFor(bystander.parent, bystander);
      const mint = (i: number) => paddedToken(flooder, `${i}-${'p'.repeat(2800)}`);
      // A bound that 1,500 remembered tokens overflow (each holds about 500 bytes: its digest,
      // what it established and its place in the index), whatever size the tokens themselves are.
      const bound = 256 * 1024;
      const small = await startServer(database(), { env: { CACHE_MAX_BYTES: String(bound) } });
      const cache = small.app.deps.cache;
      const [evictionsBefore, refusedBefore] = [cache.stats.evictions, cache.stats.refused];
      let served = 0;
      try {
        for (let batch = 0; batch < 30; batch++) {
          const tokens = await Promise.all(Array.from({ length: 50 }, (_, i) => mint(batch * 50 + i)));
          const answers = await Promise.all(tokens.map((token) => rest(small, '/auth/user-profile', { token })));
          expect(answers.filter((a) => a.status !== 200).map((a) => a.text)).toEqual([]);
          const other = await rest(small, '/auth/user-profile', { token: bystanderToken });
          expect(other.status).toBe(200);
          expect(other.body.data.user.userID).toBe(bystander.parent.id);
          served += 1;
          expect(cache.bytes).toBeLessThanOrEqual(bound);
        }
      } finally {
        await small.close();
      }
      expect(served).toBe(30);
      // The bound held by evicting, and by refusing tokens asked for no more often than those held.
      expect(cache.stats.evictions - evictionsBefore + cache.stats.refused - refusedBefore).toBeGreaterThan(0);
      expect(cache.size).toBeLessThan(1500);
    });
  });

  describe('one client cannot hold the requests in progress', () => {
    /** A request whose body never ends: its head and the start of its body, on a connection of its own. */
    const trickle = async (url: string, headers: Record<string, string>) => {
      const { port } = new URL(url);
      const socket = connect(Number(port), '127.0.0.1');
      await once(socket, 'connect');
      let answer = '';
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
      const fields = Object.entries(headers)
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join('');
      socket.write(
        `POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n${fields}\r\n{"query":`,
      );
      return { socket, answer: () => answer };
    };

    it('a client trickling bodies on as many connections as the bound allows holds its part; past it 429, and another client is served at once, by address and by credential', async () => {
      const holder = await createOrganization(database());
      const other = await createOrganization(database());
      const [holderToken, otherToken] = await Promise.all([
        tokenFor(holder.parent, holder),
        tokenFor(other.parent, other),
      ]);
      // The default budget's bound (the heap read as empty: this process holds many servers).
      const limited = await startServer(database(), {
        env: { MEMORY_BUDGET_MB: '250', TRUST_PROXY: 'loopback' },
        memoryUsed: () => 0,
      });
      const sockets: Socket[] = [];
      try {
        const max = limited.app.pressure.maxRequests;
        const part = limited.app.pressure.clientPart;
        expect(part).toBe(Math.floor(max / 4));
        const inProgress = async () =>
          metricValue(await (await fetch(`${limited.url}/metrics`)).text(), 'api_memory_requests_in_progress');
        // One address without a credential, then one credential from as many addresses: each time,
        // as many bodies as the whole bound holds.
        const holders = [
          () => ({ 'X-Forwarded-For': '203.0.113.7' }),
          (i: number) => ({ 'X-Forwarded-For': `10.2.${i >> 8}.${i & 255}`, Authorization: `Bearer ${holderToken}` }),
        ];
        for (const [round, headersOf] of holders.entries()) {
          const held = await Promise.all(Array.from({ length: max }, (_, i) => trickle(limited.url, headersOf(i))));
          sockets.push(...held.map(({ socket }) => socket));
          // Its part is in progress; every other body was refused at once, 429 with Retry-After.
          await expect.poll(inProgress, { timeout: 30_000, interval: 20 }).toBe(part);
          await expect
            .poll(() => held.filter(({ answer }) => answer().includes('\r\n\r\n')).length, {
              timeout: 30_000,
              interval: 20,
            })
            .toBe(max - part);
          for (const { answer } of held.filter(({ answer }) => answer() !== '')) {
            expect(answer()).toMatch(/^HTTP\/1\.1 429 /);
            expect(answer()).toMatch(/\r\nretry-after: 1\r\n/i);
            expect(answer()).toContain('RATE_LIMITED');
          }
          // Another client, at once: answered while every body of the holder still arrives.
          const answered = await rest(limited, '/auth/user-profile', {
            token: otherToken,
            headers: { 'x-forwarded-for': `192.0.2.${round + 1}` },
          });
          expect(answered.status).toBe(200);
          expect(held.filter(({ answer }) => answer() === '').length).toBe(part);
          for (const { socket } of held) socket.destroy();
          await expect.poll(inProgress, { timeout: 30_000, interval: 20 }).toBe(0);
        }
        expect(limited.app.pressure.refusals.client).toBe(2 * (max - part));
      } finally {
        for (const socket of sockets) socket.destroy();
        await limited.close();
      }
    });
  });

  describe('framing', () => {
    const accepts = [
      undefined,
      'application/json',
      'application/graphql-response+json',
      'application/graphql-response+json, application/json;q=0.9',
      'multipart/mixed',
      'multipart/mixed; deferSpec=20220824, application/json',
      'text/event-stream',
      '*/*',
    ];

    it.each(accepts)(
      'Accept %s: one framing, no Content-Encoding "none", parsed by a strict client',
      async (accept) => {
        const acceptLine = accept === undefined ? '' : `\r\nAccept: ${accept}`;
        for (const [head, body] of [
          [`GET /graphql?query=%7B__typename%7D HTTP/1.1\r\nHost: localhost${acceptLine}\r\nConnection: close`, ''],
          [
            `POST /graphql HTTP/1.1\r\nHost: localhost${acceptLine}\r\nContent-Type: application/json\r\nContent-Length: 27\r\nConnection: close`,
            '{"query":"{ __typename }"}\n',
          ],
        ] as const) {
          const answer = await rawRequest(server().url, head, body);
          expect(answer.status, answer.body).toBe(200);
          expect(answer.header('content-encoding')).toBeUndefined();
          expect(answer.headers.filter(([name]) => name === 'connection')).toEqual([['connection', 'close']]);
          expect(answer.body).toContain('"__typename":"Query"');
        }
        const strict = await strictGet(
          `${server().url}/graphql?query=%7B__typename%7D`,
          accept === undefined ? {} : { accept },
        );
        expect(strict.status).toBe(200);
        expect(strict.body).toContain('"__typename":"Query"');
      },
    );

    it('while draining, every answer says Connection: close, GraphQL ones included', async () => {
      const draining = await startServer(database());
      try {
        draining.app.drain();
        for (const accept of accepts) {
          const answer = await rawRequest(
            draining.url,
            `GET /graphql?query=%7B__typename%7D HTTP/1.1\r\nHost: localhost${accept ? `\r\nAccept: ${accept}` : ''}\r\nConnection: keep-alive`,
          );
          expect(answer.headers.filter(([name]) => name === 'connection')).toEqual([['connection', 'close']]);
        }
      } finally {
        await draining.close();
      }
    });
  });

  describe('malformed Host headers', () => {
    it.each(['[zz]', 'x:99999', '1.2.3.4.5', 'a b', 'x/y', 'user@host'])(
      'Host %s is 400 BAD_REQUEST, with no error logged',
      async (host) => {
        logs = captureLogs();
        const answer = await rawRequest(
          server().url,
          `GET /auth/user-profile HTTP/1.1\r\nHost: ${host}\r\nConnection: close`,
        );
        expectEnvelope(answer, 400, 'BAD_REQUEST');
        expect(logs.lines().filter((line) => line.level === 'error')).toEqual([]);
      },
    );

    it.each([
      [
        'two Host headers',
        'GET /auth/user-profile HTTP/1.1\r\nHost: localhost\r\nHost: other.example\r\nConnection: close',
        'The request has more than one Host header.',
      ],
      [
        'two Host headers, the same value',
        'GET /graphql?query=%7B__typename%7D HTTP/1.1\r\nHost: localhost\r\nhost: localhost\r\nConnection: close',
        'The request has more than one Host header.',
      ],
      [
        'no Host header (HTTP/1.1)',
        'GET /auth/user-profile HTTP/1.1\r\nConnection: close',
        'The request has no Host header.',
      ],
    ])("%s: 400 BAD_REQUEST in the JSON envelope (GraphQL's on /graphql)", async (_name, head, message) => {
      const answer = await rawRequest(server().url, head);
      expect(answer.status).toBe(400);
      expect(answer.header('content-type')).toMatch(/^application\/json/);
      if (head.startsWith('GET /graphql')) {
        expect(answer.json).toEqual({ errors: [{ message, extensions: { code: 'BAD_REQUEST' } }] });
      } else {
        expectEnvelope(answer, 400, 'BAD_REQUEST');
        expect(answer.json.error.message).toBe(message);
      }
    });

    it('HTTP/1.0 needs no Host header', async () => {
      const answer = await rawRequest(server().url, 'GET /healthz HTTP/1.0');
      expect(answer.status).toBe(200);
    });

    it('counts against the rate limit', async () => {
      const limited = await startServer(database(), { env: { RATE_LIMIT_PER_ADDRESS: '3' } });
      try {
        const statuses = [];
        for (let i = 0; i < 5; i++)
          statuses.push(
            (await rawRequest(limited.url, `GET /auth/user-profile HTTP/1.1\r\nHost: [zz]\r\nConnection: close`))
              .status,
          );
        expect(statuses).toEqual([400, 400, 400, 429, 429]);
      } finally {
        await limited.close();
      }
    });
  });

  describe('canonical credentials', () => {
    it('every spelling of one token shares its rate limit', async () => {
      const limited = await startServer(database(), { env: { RATE_LIMIT_PER_CREDENTIAL: '3' } });
      try {
        const org = await createOrganization(database());
        const token = await tokenFor(org.parent, org);
        const [h, p, s] = token.split('.') as [string, string, string];
        for (let i = 0; i < 3; i++) expect((await rest(limited, '/auth/user-profile', { token })).status).toBe(200);
        const spellings = [
          `Bearer ${token}`,
          `bearer ${token}`,
          `BEARER ${token}`,
          `Bearer  ${token}`,
          `Bearer\t${token}`,
          `Bearer ${token} `,
          `Bearer ${h}.${p}.${s}=`,
          `Bearer ${h}.${p}.${flipUnusedBits(s)}`,
        ];
        for (const authorization of spellings) {
          expectError(await rest(limited, '/auth/user-profile', { headers: { authorization } }), 429, 'RATE_LIMITED');
        }
      } finally {
        await limited.close();
      }
    });

    it('non-canonical base64url in a token (padding, changed unused bits) is an invalid token', async () => {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const [h, p, s] = token.split('.') as [string, string, string];
      expect((await rest(server(), '/auth/user-profile', { token })).status).toBe(200);
      for (const altered of [`${h}.${p}.${s}=`, `${h}.${p}.${flipUnusedBits(s)}`, `${h}=.${p}.${s}`]) {
        expectError(await rest(server(), '/auth/user-profile', { token: altered }), 401, 'UNAUTHORIZED');
      }
    });

    it("a signed sub that spells the remembered token's separator and another organization's account is refused every time, remembered or not", async () => {
      const [org, other] = [await createOrganization(database()), await createOrganization(database())];
      const now = Math.floor(Date.now() / 1000);
      // The remembered token's text is NUL-separated (db/compact-text.ts): this sub spells the
      // other organization's parent, its id and times after it, as a naive reader would split them.
      const sub = `${other.parent.id}\0${other.parent.id}\0${now + 600}\0${now}\0\0${other.parent.id}`;
      const token = await new SignJWT({ sub, iat: now, exp: now + 600 })
        .setProtectedHeader({ alg: 'HS256', kid: org.parent.publicKey })
        .sign(secretKey(org.organization.jwtSecret));
      for (let i = 0; i < 3; i++) {
        const answer = await rest(server(), '/auth/user-profile', { token });
        // Refused as the caller's mistake: no account's id holds a NUL, and none is looked up (the
        // database would refuse the parameter: a 500).
        expectError(answer, 401, 'UNAUTHORIZED');
        expect(JSON.stringify(answer.body)).not.toContain(other.parent.id);
      }
      // The organization's own tokens are remembered and served as before.
      const own = await tokenFor(org.parent, org);
      for (let i = 0; i < 2; i++)
        expect((await rest(server(), '/auth/user-profile', { token: own })).body.data.user.userID).toBe(org.parent.id);
    });

    it('a token whose exp lies further than JWT_MAX_LIFETIME_SECONDS past iat is refused', async () => {
      const org = await createOrganization(database());
      const now = Math.floor(Date.now() / 1000);
      const sign = (exp: number) =>
        new SignJWT({ sub: org.parent.id, iat: now, exp })
          .setProtectedHeader({ alg: 'HS256', kid: org.parent.publicKey })
          .sign(secretKey(org.organization.jwtSecret));
      expect((await rest(server(), '/auth/user-profile', { token: await sign(now + 86_400) })).status).toBe(200);
      expectError(await rest(server(), '/auth/user-profile', { token: await sign(now + 86_401) }), 401, 'UNAUTHORIZED');
      expectError(await rest(server(), '/auth/user-profile', { token: await sign(1e308) }), 401, 'UNAUTHORIZED');
    });
  });

  describe('page tokens are bound to their filters', () => {
    let org: BuiltOrganization;
    let token: string;
    const list = (query: string) => rest(server(), `/auth/child-accounts?${query}`, { token });

    it('a token continues only the search and date bounds it was issued for', async () => {
      org = await createOrganization(database());
      token = await tokenFor(org.parent, org);
      for (let i = 0; i < 5; i++)
        await createChild(database(), org.parent, {
          username: `ann${i}`,
          createdAt: new Date(Date.UTC(2025, 0, 1 + i)),
        });
      for (let i = 0; i < 3; i++)
        await createChild(database(), org.parent, {
          username: `zed${i}`,
          createdAt: new Date(Date.UTC(2025, 1, 1 + i)),
        });
      const first = await list('search=ann&limit=2');
      const next = first.body.data.data.pagination.nextPageToken as string;
      expect(next).toEqual(expect.any(String));
      const same = await list(`search=ann&limit=2&lastKey=${encodeURIComponent(next)}`);
      expect(same.status).toBe(200);
      expect(same.body.data.data.accounts.map((a: { username: string }) => a.username)).toEqual(['ann2', 'ann1']);
      // The same filter spelled with spaces (trimmed) or another page size is the same list.
      expect((await list(`search=%20ann%20&limit=3&lastKey=${encodeURIComponent(next)}`)).status).toBe(200);
      for (const other of [
        '',
        'search=zzzzz',
        'search=an',
        'startDate=2025-01-01&search=ann',
        'endDate=2030-01-01&search=ann',
      ]) {
        expectError(
          await list(`${other}&limit=2&lastKey=${encodeURIComponent(next)}`),
          400,
          'INVALID_PAGINATION_TOKEN',
        );
      }
      const [body, signature] = next.split('.') as [string, string];
      for (const altered of [`${next}=`, `${body}.${flipUnusedBits(signature)}`, `${body}=.${signature}`]) {
        expectError(
          await list(`search=ann&limit=2&lastKey=${encodeURIComponent(altered)}`),
          400,
          'INVALID_PAGINATION_TOKEN',
        );
      }
    });

    it('GraphQL cursors too', async () => {
      const query =
        'query ($search: String, $after: String) { childAccounts(search: $search, limit: 2, after: $after) { pageInfo { endCursor } edges { node { username } } } }';
      const first = await server().graphql<{ childAccounts: { pageInfo: { endCursor: string } } }>(query, {
        token,
        variables: { search: 'ann' },
      });
      const after = first.data!.childAccounts.pageInfo.endCursor;
      const same = await server().graphql(query, { token, variables: { search: 'ann', after } });
      expect(same.errors).toBeUndefined();
      const other = await server().graphql(query, { token, variables: { search: 'zed', after } });
      expect(other.errors?.[0]?.extensions?.code).toBe('INVALID_PAGINATION_TOKEN');
    });
  });

  describe('dates', () => {
    it('years 0000-0099 are those years, not 1900-1999', async () => {
      expect(parseDateBound('startDate', '0050-12-31', 'start').toISOString()).toBe('0050-12-31T00:00:00.000Z');
      expect(parseDateBound('endDate', '0000-02-29', 'end').toISOString()).toBe('0000-02-29T23:59:59.999Z');
      expect(() => parseDateBound('endDate', '0100-02-29', 'end')).toThrow();
      expect(parseDateBound('startDate', '0007-03-04T05:06:07+01:00', 'start').toISOString()).toBe(
        '0007-03-04T04:06:07.000Z',
      );
      const org = await createOrganization(database());
      const parentToken = await tokenFor(org.parent, org);
      await createChild(database(), org.parent, {
        username: 'old1950',
        createdAt: new Date('1950-06-01T00:00:00.000Z'),
      });
      await createChild(database(), org.parent, {
        username: 'ancient0050',
        createdAt: new Date('0050-06-01T00:00:00.000Z'),
      });
      const upTo50 = await rest(server(), '/auth/child-accounts?endDate=0050-12-31', { token: parentToken });
      expect(upTo50.body.data.data.accounts.map((a: { username: string }) => a.username)).toEqual(['ancient0050']);
      expect(upTo50.body.data.data.accounts[0].registered).toBe('0050-06-01T00:00:00.000Z');
      const from1950 = await rest(server(), '/auth/child-accounts?startDate=1950-01-01&endDate=1950-12-31', {
        token: parentToken,
      });
      expect(from1950.body.data.data.accounts.map((a: { username: string }) => a.username)).toEqual(['old1950']);
    });
  });

  describe('retrieval counter', () => {
    it('an operation asking for the organization under 15 aliases counts one retrieval', async () => {
      const org = await createOrganization(database());
      const aliases = Array.from({ length: 15 }, (_, i) => `a${i}: organization { organizationName }`).join(' ');
      const result = await server().graphql(`{ ${aliases} }`, { publicKey: org.parent.publicKey });
      expect(result.errors).toBeUndefined();
      expect(Object.keys(result.data!)).toHaveLength(15);
      await server().app.deps.retrievals.flush();
      const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: org.parent.id } });
      expect(row.detailsRetrievalCount).toBe(1n);
    });
  });

  describe('paths', () => {
    const paths = [
      '//x/parent/credit-analysis',
      '/auth/%2e%2e/parent/credit-analysis',
      '/auth\\user-profile',
      '/public/%2e%2e/graphql',
      '/x/../graphql',
      '/auth/./user-profile',
      '/auth//user-profile',
      '/auth/user-profile/',
      '/AUTH/user-profile',
      '/auth/user%2Dprofile',
      'http://localhost/auth/user-profile',
    ];
    it.each(paths)('%s is 404 NOT_FOUND, not the route it normalises to', async (path) => {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const answer = await rawRequest(
        server().url,
        `GET ${path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\nConnection: close`,
      );
      expectEnvelope(answer, 404, 'NOT_FOUND');
    });
  });

  describe('client address behind proxies', () => {
    const request = (remoteAddress: string, forwarded?: string) =>
      ({
        socket: { remoteAddress },
        headers: forwarded ? { 'x-forwarded-for': forwarded } : {},
        connection: { remoteAddress },
      }) as never;

    it('is read from the right, past the trusted hops only (proxy-addr)', () => {
      const byHops = new RateLimiter(loadConfig({ TRUST_PROXY: '1' }).rateLimit);
      expect(byHops.clientAddress(request('10.0.0.9', 'forged, 203.0.113.7'))).toBe('203.0.113.7');
      expect(byHops.clientAddress(request('10.0.0.9'))).toBe('10.0.0.9');
      const byList = new RateLimiter(loadConfig({ TRUST_PROXY: 'loopback, 10.0.0.0/8' }).rateLimit);
      expect(byList.clientAddress(request('127.0.0.1', 'forged, 203.0.113.7, 10.1.2.3'))).toBe('203.0.113.7');
      // Not from a trusted proxy: the header is not believed at all.
      expect(byList.clientAddress(request('198.51.100.1', '203.0.113.7'))).toBe('198.51.100.1');
      const none = new RateLimiter(loadConfig({}).rateLimit);
      expect(none.clientAddress(request('127.0.0.1', '203.0.113.7'))).toBe('127.0.0.1');
      expect(() => loadConfig({ TRUST_PROXY: 'true' })).toThrow(/TRUST_PROXY/);
      expect(() => loadConfig({ TRUST_PROXY: 'not-an-address' })).toThrow(/TRUST_PROXY/);
    });

    it('a forged X-Forwarded-For entry does not buy a fresh allowance', async () => {
      const limited = await startServer(database(), { env: { RATE_LIMIT_PER_ADDRESS: '2', TRUST_PROXY: 'loopback' } });
      try {
        const statuses = [];
        for (let i = 0; i < 4; i++) {
          statuses.push(
            (
              await rest(limited, '/auth/user-profile', {
                headers: { 'x-forwarded-for': `198.51.100.${i}, 203.0.113.7` },
              })
            ).status,
          );
        }
        expect(statuses).toEqual([401, 401, 429, 429]);
      } finally {
        await limited.close();
      }
    });
  });

  describe('hygiene', () => {
    it('clients that hang up mid-body are not logged as errors', async () => {
      logs = captureLogs();
      const { hostname, port } = new URL(server().url);
      const net = await import('node:net');
      for (let i = 0; i < 20; i++) {
        await new Promise<void>((resolve) => {
          const socket = net.connect(Number(port), hostname, () => {
            socket.write(
              'POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"query":',
            );
            setTimeout(() => {
              socket.destroy();
              resolve();
            }, 20);
          });
        });
      }
      // The server is still there, and nothing was logged at error level.
      expect((await rest(server(), '/health')).status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(logs.lines().filter((line) => line.level === 'error')).toEqual([]);
    });

    it('malformed JSON bodies answer 400 without the parser error in production', async () => {
      const production = await startServer(database(), { env: { NODE_ENV: 'production' } });
      try {
        const response = await fetch(`${production.url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{bad',
        });
        expect(response.status).toBe(400);
        expect(await response.json()).toEqual({
          errors: [{ message: 'POST body sent invalid JSON.', extensions: { code: 'BAD_REQUEST' } }],
        });
      } finally {
        await production.close();
      }
    });

    it('refusals before the route (413, 414, 429, 431) carry CORS and rate-limit headers; /graphql ones are GraphQL errors', async () => {
      const limited = await startServer(database(), { env: { RATE_LIMIT_PER_ADDRESS: '4', MAX_BODY_BYTES: '1024' } });
      try {
        const origin = { origin: 'https://app.example.com' };
        const tooLarge = await fetch(`${limited.url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...origin },
          body: JSON.stringify({ query: `{ __typename } # ${'x'.repeat(5000)}` }),
        });
        const tooManyHeaders = await fetch(`${limited.url}/graphql`, {
          headers: { ...origin, ...Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`x-h${i}`, 'v'])) },
        });
        const tooLong = await fetch(`${limited.url}/auth/user-profile?${'a'.repeat(9000)}`, { headers: origin });
        await fetch(`${limited.url}/graphql?query=%7B__typename%7D`, { headers: origin });
        const limitedAnswer = await fetch(`${limited.url}/graphql?query=%7B__typename%7D`, { headers: origin });
        for (const [response, status] of [
          [tooLarge, 413],
          [tooManyHeaders, 431],
          [tooLong, 414],
          [limitedAnswer, 429],
        ] as const) {
          expect(response.status).toBe(status);
          expect(response.headers.get('access-control-allow-origin'), String(status)).toBe('*');
          expect(response.headers.get('ratelimit-limit')).toBe('4');
        }
        for (const [response, code] of [
          [tooLarge, 'PAYLOAD_TOO_LARGE'],
          [tooManyHeaders, 'REQUEST_HEADER_FIELDS_TOO_LARGE'],
          [limitedAnswer, 'RATE_LIMITED'],
        ] as const) {
          // A refusal with a wait carries it, as the REST one does in Retry-After.
          const extensions =
            code === 'RATE_LIMITED'
              ? { code, retryAfterSeconds: Number(response.headers.get('retry-after')) }
              : { code };
          expect(await response.json()).toEqual({ errors: [{ message: expect.any(String), extensions }] });
        }
        expect(await tooLong.json()).toEqual({
          success: false,
          error: { code: 'URI_TOO_LONG', message: expect.any(String) },
        });
      } finally {
        await limited.close();
      }
    });
  });

  describe('a hostile tenant beside a quiet one', () => {
    it('while one organization floods, another organization keeps being answered, and the cache stays within its bound', async () => {
      const flooder = await createOrganization(database());
      const quiet = await createOrganization(database());
      for (let i = 0; i < 30; i++) await createChild(database(), flooder.parent, { username: `f${i}` });
      const flooderToken = await tokenFor(flooder.parent, flooder);
      const quietToken = await tokenFor(quiet.parent, quiet);
      expect((await rest(server(), '/auth/user-profile', { token: quietToken })).status).toBe(200);
      const { hostname, port } = new URL(server().url);
      const net = await import('node:net');
      // Connections that send half a head and wait.
      const slow = Array.from({ length: 30 }, () => {
        const socket = net.connect(Number(port), hostname, () =>
          socket.write('GET /auth/user-profile HTTP/1.1\r\nHost: localhost\r\nX-Slow: '),
        );
        socket.on('error', () => undefined);
        return socket;
      });
      let floodDone = false;
      const flood = (async () => {
        const mint = (i: number) => paddedToken(flooder, `${i}-${'p'.repeat(2800)}`);
        for (let round = 0; round < 20; round++) {
          const work: Promise<unknown>[] = [];
          for (let i = 0; i < 10; i++) {
            const n = round * 10 + i;
            work.push(
              rest(server(), `/auth/child-accounts?search=${'q'.repeat(n % 7)}term${n}`, { token: flooderToken }),
            );
            work.push(rest(server(), '/auth/organization-details', { publicKey: `APK_unknown${n}_${n}` }));
            work.push(rest(server(), `/auth/child-accounts?${'search=a&'.repeat(1000)}`, { token: flooderToken }));
            work.push(mint(n).then((token) => rest(server(), '/auth/user-profile', { token })));
          }
          await Promise.all(work);
        }
        floodDone = true;
      })();
      const quietStatuses: number[] = [];
      let answeredDuringFlood = 0;
      for (let i = 0; i < 20; i++) {
        const answer = await rest(server(), '/auth/user-profile', { token: quietToken });
        quietStatuses.push(answer.status);
        if (!floodDone) answeredDuringFlood += 1;
      }
      await flood;
      for (const socket of slow) socket.destroy();
      expect(quietStatuses.every((status) => status === 200)).toBe(true);
      // The quiet organization was served while the flood was still running, not after it.
      expect(answeredDuringFlood).toBe(20);
      expect(server().app.deps.cache.bytes).toBeLessThanOrEqual(1024 * 1024);
    });
  });
});
