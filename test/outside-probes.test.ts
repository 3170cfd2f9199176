import { connect, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer, type TestServer } from './helpers/app.js';
import { seedSql, testMode, useTestDatabase } from './helpers/database.js';

/*
 * The newest features probed from the outside, as a hostile caller would use them: live updates,
 * the export, global ids, paging arguments and conditional requests. Each case names what the
 * caller tries and what the others must not pay for it.
 */

const CREDIT = 'subscription { creditAnalysisChanged { creditBalance } }';
const ORGANIZATION = 'subscription { organizationChanged { organizationName } }';

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;
/** Heap in use after full collections. */
async function settledHeap(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    collect();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return process.memoryUsage().heapUsed;
}

/**
 * A raw event-stream request (GraphQL over SSE, distinct connections), resolved once its head and first event
 * arrived.
 */
function openStream(
  server: TestServer,
  token: string,
  query: string,
): Promise<{ socket: Socket; received: () => string }> {
  const url = new URL(server.url);
  const socket = connect(Number(url.port), url.hostname);
  let text = '';
  socket.on('error', () => {});
  return new Promise((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (/\r\n\r\n[\s\S]*event: next/.test(text)) resolve({ socket, received: () => text });
      else if (/^HTTP\/1\.1 [45]/.test(text)) reject(new Error(text.slice(0, 200)));
    });
    socket.on('close', () => reject(new Error(`closed: ${text.slice(0, 200)}`)));
    socket.write(
      `GET /graphql?query=${encodeURIComponent(query)} HTTP/1.1\r\nHost: ${url.host}\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${token}\r\n\r\n`,
    );
  });
}

const liveGauge = async (server: TestServer) =>
  Number(/^api_live_subscriptions (\d+)$/m.exec((await server.app.metricsText()).text)?.[1] ?? NaN);

describe(`live updates, probed from outside (${testMode})`, () => {
  const database = useTestDatabase();
  const wide = useServer(database, {
    env: {
      LIVE_MAX_PER_CREDENTIAL: '1000',
      LIVE_MAX_PER_ORGANIZATION: '1000',
      LIVE_MAX_STREAMS: '5000',
      LIVE_MIN_INTERVAL_MS: '0',
      LIVE_STALL_MS: '1000',
    },
  });
  const narrow = useServer(database, { env: { LIVE_MAX_PER_CREDENTIAL: '5', LIVE_MAX_PER_ORGANIZATION: '3' } });

  it('2,000 streams opened and dropped abruptly: the open count, the gauge and the heap return to where they were', async () => {
    const organizations = [await createOrganization(database()), await createOrganization(database())];
    const tokens = await Promise.all(organizations.map((built) => tokenFor(built.parent, built)));
    // Warm: the first stream of each organization, opened and closed, so that its caches are there before.
    for (const token of tokens) (await openStream(wide(), token, CREDIT)).socket.destroy();
    await expect.poll(() => wide().app.deps.live!.open, { timeout: 5_000 }).toBe(0);
    const before = await settledHeap();
    const streams: Socket[] = [];
    for (let batch = 0; batch < 10; batch++) {
      const opened = await Promise.all(
        Array.from({ length: 200 }, (_, i) => openStream(wide(), tokens[(batch * 200 + i) % 2]!, CREDIT)),
      );
      streams.push(...opened.map((stream) => stream.socket));
    }
    expect(wide().app.deps.live!.open).toBe(2_000);
    expect(await liveGauge(wide())).toBe(2_000);
    const open = await settledHeap();
    const sockets = streams.splice(0);
    // Half reset (RST), half closed without a word (FIN): neither says goodbye at the HTTP level.
    sockets.forEach((socket, i) => (i % 2 ? socket.resetAndDestroy() : socket.destroy()));
    sockets.length = 0;
    await expect.poll(() => wide().app.deps.live!.open, { timeout: 10_000 }).toBe(0);
    expect(await liveGauge(wide())).toBe(0);
    let after = await settledHeap();
    for (let i = 0; i < 20 && after - before > 4 * 1024 * 1024; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      after = await settledHeap();
    }
    // What 2,000 open streams held is gone again (within 4 MB of where it started).
    expect(open - before, `held while open: ${open - before} bytes`).toBeGreaterThan(0);
    expect(after - before, `left after: ${after - before} bytes (open: ${open - before})`).toBeLessThan(
      4 * 1024 * 1024,
    );
    // And the server still takes streams.
    (await openStream(wide(), tokens[0]!, CREDIT)).socket.destroy();
  }, 120_000);

  it('a client that never reads is cut off after LIVE_STALL_MS, and its subscription ends', async () => {
    // Large answers (a long purchase history, about 1 MB), pushed as fast as changes arrive: the socket fills.
    const built = await createOrganization(database());
    for (let from = 0; from < 30_000; from += 5_000) {
      await seedSql(
        database(),
        `INSERT INTO "PackagePurchase" ("transactionId", "organizationId", "packageType", "purchasedAt", "creditsAdded", "freeUsersAdded", price)
         SELECT 'TXN_' || $1 || '_' || i, $1, 'STARTER', timestamptz '2024-01-01T00:00:00Z' + i * interval '1 minute', 10000, 1000, 10
         FROM generate_series($2::int, $2::int + 4999) AS i`,
        [built.parent.id, from],
      );
    }
    const child = await createChild(database(), built.parent);
    const query =
      'subscription { creditAnalysisChanged { creditBalance packageHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } } }';
    const stream = await openStream(wide(), await tokenFor(built.parent, built), query);
    stream.socket.pause();
    const closed = new Promise<number>((resolve) => stream.socket.on('close', () => resolve(Date.now())));
    let lastChange = Date.now();
    let gone = false;
    void closed.then(() => (gone = true));
    // The sign-in service keeps writing; each change is a push of about 1 MB the client never reads.
    for (let i = 0; i < 200 && !gone && wide().app.deps.live!.open > 0; i++) {
      await database().sql.query(
        `UPDATE "Account" SET "signInCount" = "signInCount" + 1, "lastLogin" = now() WHERE id = $1`,
        [child.id],
      );
      await database().sql.query(
        `UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1 WHERE "parentId" = $1`,
        [built.parent.id],
      );
      lastChange = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await expect.poll(() => wide().app.deps.live!.open, { timeout: 10_000 }).toBe(0);
    stream.socket.resume();
    const at = await closed;
    // Cut by the stall bound (LIVE_STALL_MS, 1 s), not by the end of the changes (about 20 s of them).
    expect(at - lastChange).toBeLessThan(5_000);
    expect(await liveGauge(wide())).toBe(0);
  }, 120_000);

  it('many tokens of one organization stop at the per-organization bound; another organization is not affected', async () => {
    const built = await createOrganization(database());
    const children = await Promise.all(Array.from({ length: 4 }, () => createChild(database(), built.parent)));
    const tokens = await Promise.all(children.map((child) => tokenFor(child, built)));
    const held = [];
    for (const token of tokens.slice(0, 3)) held.push(await openStream(narrow(), token, ORGANIZATION));
    const refused = await openStream(narrow(), tokens[3]!, ORGANIZATION).then(
      (stream) => stream.received(),
      (error: Error) => error.message,
    );
    expect(refused).toContain('TOO_MANY_SUBSCRIPTIONS');
    const other = await createOrganization(database());
    const elsewhere = await openStream(narrow(), await tokenFor(other.parent, other), ORGANIZATION);
    expect(elsewhere.received()).toContain('organizationChanged');
    for (const stream of [...held, elsewhere]) stream.socket.destroy();
    await expect.poll(() => narrow().app.deps.live!.open, { timeout: 5_000 }).toBe(0);
  });
});

describe(`global ids and node, probed from outside (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const NODE = 'query Node($id: ID!) { node(id: $id) { id } }';
  const encode = (text: string) => Buffer.from(text).toString('base64');

  it("malformed, empty, huge and other-tenant ids answer null, never a 5xx; an absent id does the same work as another tenant's", async () => {
    const [mine, theirs] = [await createOrganization(database()), await createOrganization(database())];
    const token = await tokenFor(mine.parent, mine);
    const theirChild = await createChild(database(), theirs.parent);
    const ids = [
      '',
      ' ',
      '!!!',
      '%%%%',
      encode('Account:'),
      encode(':'),
      encode('Nothing:USR_1'),
      encode(`Account:${theirs.parent.id}`),
      encode(`Account:${theirChild.id}`),
      encode(`Organization:${theirs.parent.publicKey}`),
      encode('Account:USR_does_not_exist'),
      encode('Organization:APK_does_not_exist'),
      encode(`Account:${mine.parent.id}`).replace(/=+$/, '') + '====',
      'A'.repeat(60_000),
      encode(`Account:${'x'.repeat(40_000)}`),
      '\u0000\u00ff\ud800',
    ];
    for (const id of ids) {
      const answer = await server().graphql<{ node: unknown }>(NODE, { token, variables: { id } });
      expect(answer.status, JSON.stringify(id).slice(0, 40)).toBe(200);
      expect(answer.data?.node, JSON.stringify(id).slice(0, 40)).toBeNull();
      expect(answer.errors, JSON.stringify(id).slice(0, 40)).toBeUndefined();
    }
    // Not an ID at all: the documented GraphQL error, 400.
    for (const id of [null, 12.5, { id: 1 }, ['a']]) {
      const answer = await server().graphql(NODE, { token, variables: { id } });
      expect(answer.status).toBe(400);
      expect(answer.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
    }
    // Another tenant's account that exists, and one that does not: the same answer, and the same
    // reads (none), so neither the body nor the time tells them apart.
    const cache = server().app.deps.cache;
    const work = async (id: string) => {
      const [hits, misses] = [cache.stats.hits, cache.stats.misses];
      const answer = await server().graphql(NODE, { token, variables: { id } });
      return { answer: JSON.stringify(answer), reads: cache.stats.hits - hits + (cache.stats.misses - misses) };
    };
    await work(encode('Account:USR_warm'));
    const existing = await work(encode(`Account:${theirChild.id}`));
    const absent = await work(encode('Account:USR_does_not_exist_either'));
    expect(existing).toEqual(absent);
  });
});

describe(`paging and history arguments, probed from outside (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const PAGE = `query Page($first: Int, $after: String, $last: Int, $before: String, $limit: Int) {
    childAccounts(first: $first, after: $after, last: $last, before: $before, limit: $limit) { edges { cursor node { username } } pageInfo { endCursor } }
  }`;

  it('extreme, contradictory and forged arguments give the documented errors, never a 5xx', async () => {
    const built = await createOrganization(database());
    for (let i = 0; i < 3; i++) await createChild(database(), built.parent);
    const token = await tokenFor(built.parent, built);
    const codes = async (variables: Record<string, unknown>) => {
      const answer = await server().graphql(PAGE, { token, variables });
      expect(answer.status, JSON.stringify(variables).slice(0, 80)).toBeLessThan(500);
      return answer.errors?.map((e) => e.extensions?.code);
    };
    const cursor = (
      await server().graphql<{ childAccounts: { pageInfo: { endCursor: string } } }>(PAGE, {
        token,
        variables: { first: 1 },
      })
    ).data!.childAccounts.pageInfo.endCursor;
    for (const variables of [
      { first: 2_147_483_647 },
      { first: -2_147_483_648 },
      { first: 0 },
      { last: 2_147_483_647 },
      { limit: -1 },
      { first: 1, last: 1 },
      { first: 1, limit: 1 },
    ]) {
      expect(await codes(variables), JSON.stringify(variables)).toEqual(['INVALID_LIMIT']);
    }
    // Outside GraphQL's Int: refused by the variables' coercion.
    expect(await codes({ first: 2 ** 31 })).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(await codes({ first: '1' })).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    const tampered = cursor.slice(0, -2) + (cursor.endsWith('A') ? 'BB' : 'AA');
    for (const forged of ['', 'x', '=', tampered, cursor + cursor, 'A'.repeat(50_000), '\u0000', '😀'.repeat(100)]) {
      expect(await codes({ first: 1, after: forged }), forged.slice(0, 20)).toEqual(['INVALID_PAGINATION_TOKEN']);
      expect(await codes({ last: 1, before: forged }), forged.slice(0, 20)).toEqual(['INVALID_PAGINATION_TOKEN']);
    }
    // Both cursors at once are a window (Relay's ApplyCursorsToEdges): one that holds nothing is an empty page.
    expect(await codes({ first: 1, after: cursor, before: cursor })).toBeUndefined();
    const empty = await server().graphql<{ childAccounts: { edges: unknown[] } }>(PAGE, {
      token,
      variables: { first: 5, after: cursor, before: cursor },
    });
    expect(empty.data!.childAccounts.edges).toEqual([]);
    // The REST list: the same bounds, in the envelope.
    for (const query of ['limit=2147483648', 'limit=-1', 'limit=1e3', `lastKey=${'A'.repeat(5_000)}`, 'lastKey=%00']) {
      const answer = await rest(server(), `/auth/child-accounts?${query}`, { token });
      expect(answer.status, query).toBe(400);
      expect((answer.body as { error: { code: string } }).error.code, query).toMatch(
        /^INVALID_(LIMIT|PAGINATION_TOKEN)$/,
      );
    }
  });

  it('usageHistory(months:) outside 1-36 is INVALID_MONTHS, inside it answers', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built);
    const query = 'query H($months: Int!) { creditAnalysis { usageHistory(months: $months) { month } } }';
    for (const months of [0, 37, -1, 2_147_483_647, -2_147_483_648]) {
      const answer = await server().graphql(query, { token, variables: { months } });
      expect(answer.status, String(months)).toBeLessThan(500);
      expect(
        answer.errors?.map((e) => e.extensions?.code),
        String(months),
      ).toEqual(['INVALID_MONTHS']);
    }
    for (const months of [1, 36]) {
      const answer = await server().graphql<{ creditAnalysis: { usageHistory: unknown[] } }>(query, {
        token,
        variables: { months },
      });
      expect(answer.data?.creditAnalysis.usageHistory).toHaveLength(months);
    }
  });
});

describe(`conditional requests, probed from outside (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);

  async function twoViewers(): Promise<{ built: BuiltOrganization; tokens: string[] }> {
    const built = await createOrganization(database());
    const children = [await createChild(database(), built.parent), await createChild(database(), built.parent)];
    return {
      built,
      tokens: await Promise.all([tokenFor(built.parent, built), ...children.map((child) => tokenFor(child, built))]),
    };
  }

  it("a 304 never answers for another viewer's representation, by REST or by GraphQL", async () => {
    const { built, tokens } = await twoViewers();
    for (const path of [
      '/auth/user-profile',
      '/auth/organization-details',
      '/parent/credit-analysis',
      '/auth/child-accounts',
    ]) {
      const tags = new Map<string, string>();
      for (const token of tokens) {
        const answer = await rest(server(), path, { token });
        const tag = answer.headers.get('etag');
        if (answer.status === 200 && tag) tags.set(token, tag);
      }
      const publicKey = await rest(server(), path, { publicKey: built.parent.publicKey });
      if (publicKey.headers.get('etag')) tags.set('publicKey', publicKey.headers.get('etag')!);
      for (const [owner, tag] of tags) {
        for (const token of tokens.filter((t) => t !== owner)) {
          const other = await rest(server(), path, { token, headers: { 'if-none-match': tag } });
          // Only the very same bytes may be revalidated: a 304 means this viewer's own answer has this tag.
          if (other.status === 304) expect((await rest(server(), path, { token })).headers.get('etag'), path).toBe(tag);
        }
      }
    }
  });

  it('an If-None-Match of any size or shape costs bounded work and never errs', async () => {
    const { tokens } = await twoViewers();
    const token = tokens[1]!;
    const first = await rest(server(), '/auth/user-profile', { token });
    const tag = first.headers.get('etag')!;
    const shapes = [
      '',
      ',,,,,',
      'W/',
      '"',
      '"unterminated',
      `${'"x",'.repeat(1_500)}${tag}`,
      `${','.repeat(6_000)}${tag}`,
      `W/"${'a'.repeat(6_000)}"`,
      '\t*\t',
      `"${'\u00ff'.repeat(100)}"`,
    ];
    for (const shape of shapes) {
      const answer = await rest(server(), '/auth/user-profile', { token, headers: { 'if-none-match': shape } });
      expect([200, 304], shape.slice(0, 30)).toContain(answer.status);
    }
    // A tag past the first 64 listed is not read: the answer is sent whole, not a 304.
    const late = await rest(server(), '/auth/user-profile', {
      token,
      headers: { 'if-none-match': `${'"x",'.repeat(64)}${tag}` },
    });
    expect(late.status).toBe(200);
    expect(late.body).toEqual(first.body);
    // Over the head bound: 431, as any large header.
    const huge = await rest(server(), '/auth/user-profile', {
      token,
      headers: { 'if-none-match': `"${'a'.repeat(70_000)}"` },
    });
    expect(huge.status).toBe(431);
  });
});
