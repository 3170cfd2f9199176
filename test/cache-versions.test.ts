import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseChange } from '../src/db/capture/changes.js';
import { cacheTags } from '../src/db/cache-tags.js';
import { EntityCache } from '../src/db/entity-cache.js';
import { ReadSet } from '../src/db/read-set.js';
import { parseSnapshot, sees } from '../src/db/snapshots.js';
import { childCountsKey, keepChildListCurrent, type ChildCounts } from '../src/db/child-list-changes.js';
import { ACTIVE_WINDOW_MS } from '../src/domain/activity.js';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { createLoaders } from '../src/db/loaders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { ManualFeed } from './helpers/manual-feed.js';

const snapshot = (text: string) => parseSnapshot(text)!;

describe('snapshots', () => {
  it('read as PostgreSQL prints them, and see exactly the transactions committed before them', () => {
    const s = snapshot('100:105:101,103');
    expect(s).toEqual({ xmin: 100, xmax: 105, xip: [101, 103] });
    expect([99, 100, 101, 102, 103, 104, 105].map((x) => sees(s, x))).toEqual([true, true, false, true, false, true, false]);
    expect(parseSnapshot('not a snapshot')).toBeUndefined();
    expect(parseSnapshot(undefined)).toBeUndefined();
  });
});

describe('the cache with announced transaction ids', () => {
  const tag = cacheTags.organization('USR_p');
  const setup = (now = Date.now()) => {
    const feed = new ManualFeed();
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 });
    keepChildListCurrent(feed, cache, () => now);
    return { feed, cache };
  };

  it('stores a read that overlapped an announcement only if its snapshot saw the change', () => {
    const { feed, cache } = setup();
    const ticket = cache.ticket();
    feed.announce({ t: 'organization', id: 'USR_p', x: 500, s: false });
    cache.set(ticket, 'a', 1, [tag], snapshot('499:499:'));
    expect(cache.get('a')).toBeUndefined();
    cache.set(ticket, 'b', 1, [tag], snapshot('500:502:500'));
    expect(cache.get('b')).toBeUndefined();
    cache.set(ticket, 'c', 1, [tag]);
    expect(cache.get('c')).toBeUndefined();
    cache.set(ticket, 'd', 1, [tag], snapshot('501:501:'));
    expect(cache.get('d')?.value).toBe(1);
    // An announcement without a transaction id (an older trigger) cannot be proven seen.
    const later = cache.ticket();
    feed.announce({ t: 'organization', id: 'USR_p', s: false });
    cache.set(later, 'e', 1, [tag], snapshot('900:900:'));
    expect(cache.get('e')).toBeUndefined();
  });

  it('keeps through an announcement the entries whose snapshot saw it, and drops the others', () => {
    const { feed, cache } = setup();
    cache.set(cache.ticket(), 'seen', 1, [tag], snapshot('701:701:'));
    cache.set(cache.ticket(), 'unseen', 1, [tag], snapshot('690:702:700'));
    cache.set(cache.ticket(), 'plain', 1, [tag]);
    feed.announce({ t: 'organization', id: 'USR_p', x: 700, s: false });
    expect(cache.get('seen')?.value).toBe(1);
    expect(cache.get('unseen')).toBeUndefined();
    expect(cache.get('plain')).toBeUndefined();
    feed.announce({ t: 'organization', id: 'USR_p', x: 705, s: false });
    expect(cache.get('seen')).toBeUndefined();
  });

  it('lets callers share a read in flight, but not one that may predate a change they know of', async () => {
    const { feed, cache } = setup();
    let finish!: (read: { value: unknown; seen?: ReturnType<typeof snapshot> }) => void;
    cache.track('k', cache.ticket(), new Promise((resolve) => (finish = resolve)));
    const early = cache.join<number>('k', [tag]);
    feed.announce({ t: 'organization', id: 'USR_p', x: 800, s: false });
    const late = cache.join<number>('k', [tag]);
    finish({ value: 7, seen: snapshot('790:790:') });
    expect(await early).toEqual({ value: 7 });
    // The read's snapshot did not see transaction 800, announced before this caller joined.
    expect(await late).toBeUndefined();
    expect(cache.join('k', [tag])).toBeUndefined();

    cache.track('k', cache.ticket(), new Promise((resolve) => (finish = resolve)));
    feed.announce({ t: 'organization', id: 'USR_p', x: 801, s: false });
    const joined = cache.join<number>('k', [tag]);
    finish({ value: 8, seen: snapshot('802:802:') });
    // It did see 801: committed before it began reading, though announced after it was asked.
    expect(await joined).toEqual({ value: 8 });
  });

  it("keeps a parent's child counts through sign-ins of children who were active and still are", () => {
    const now = Date.UTC(2026, 10, 22);
    const { feed, cache } = setup(now);
    const counts = () => cache.get('stats');
    const store = () => cache.set(cache.ticket(), 'stats', { active: 1 }, [cacheTags.children('USR_p')]);
    store();
    const recent = now - 1000;
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, l: recent, n: now, x: 1 });
    expect(counts()).toBeDefined();
    // A first login, a return after more than 30 days, a change beyond activity: counts change.
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, n: now, x: 2 });
    expect(counts()).toBeUndefined();
    store();
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, l: now - ACTIVE_WINDOW_MS - 1, n: now, x: 3 });
    expect(counts()).toBeUndefined();
    store();
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: true, l: recent, n: now, x: 4 });
    expect(counts()).toBeUndefined();
    // An announcement that does not name its transaction may come from older triggers, which sent
    // no logins: counted again.
    store();
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, l: recent, n: now });
    expect(counts()).toBeUndefined();
  });

  it("adds a child's first login in the window to its parent's unfiltered active count, unless the count already has it", () => {
    const now = Date.UTC(2026, 10, 22);
    const { feed, cache } = setup(now);
    const key = childCountsKey('USR_p');
    const counts = (validUntil = now + 86_400_000): ChildCounts => ({ total: null, active: 5, computedAt: now - 1000, validUntil });
    const filtered = 'stats:USR_p||1700000000000|smith';
    cache.set(cache.ticket(), key, counts(), [cacheTags.children('USR_p')], snapshot('10:10:'));
    cache.set(cache.ticket(), filtered, counts(), [cacheTags.children('USR_p')]);
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, n: now, x: 11 });
    expect(cache.get<ChildCounts>(key)?.value.active).toBe(6);
    // A filtered count may or may not include the child: counted again.
    expect(cache.get(filtered)).toBeUndefined();
    // The same child again, now active: no change.
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', s: false, l: now, n: now + 5, x: 12 });
    expect(cache.get<ChildCounts>(key)?.value.active).toBe(6);
    // A count whose snapshot saw the sign-in already has it.
    cache.set(cache.ticket(), key, counts(), [cacheTags.children('USR_p')], snapshot('20:20:'));
    feed.announce({ t: 'account', id: 'USR_d', p: 'USR_p', s: false, l: now - ACTIVE_WINDOW_MS - 1, n: now, x: 13 });
    expect(cache.get<ChildCounts>(key)?.value.active).toBe(5);
    // A count past its validity is dropped, not amended.
    cache.set(cache.ticket(), key, counts(now - 1), [cacheTags.children('USR_p')], snapshot('20:20:'));
    feed.announce({ t: 'account', id: 'USR_e', p: 'USR_p', s: false, n: now, x: 21 });
    expect(cache.get(key)).toBeUndefined();
    // A child becoming inactive by a write: counted again.
    cache.set(cache.ticket(), key, counts(), [cacheTags.children('USR_p')], snapshot('30:30:'));
    feed.announce({ t: 'account', id: 'USR_e', p: 'USR_p', s: false, l: now, n: now - ACTIVE_WINDOW_MS - 1, x: 31 });
    expect(cache.get(key)).toBeUndefined();
  });
});

describe('announcements, parsed once into a typed change', () => {
  it.each([
    ['a row change', { t: 'account', id: 'USR_a', x: 7, k: 'APK_a_1', p: 'USR_p', s: false, l: 1, n: 2 }, { kind: 'row', entity: 'account', id: 'USR_a', version: 7, publicKey: 'APK_a_1', parentId: 'USR_p', stable: false, lastLogin: { before: 1, after: 2 } }],
    ['never logged in before', { t: 'account', id: 'USR_a', x: 7, p: 'USR_p', s: false, n: 2 }, { kind: 'row', stable: false, lastLogin: { before: null, after: 2 } }],
    ['no transaction: logins unknown', { t: 'account', id: 'USR_a', p: 'USR_p', s: false, n: 2 }, { kind: 'row', version: undefined, lastLogin: undefined }],
    ['stable unless said otherwise', { t: 'organization', id: 'USR_p', x: 1 }, { kind: 'row', entity: 'organization', stable: true }],
    ['a bulk change', { t: 'account', all: true, x: 3 }, { kind: 'all' }],
    ['an unknown table', { t: 'invoice', id: 'x' }, { kind: 'all' }],
    ['no key', { t: 'account', x: 3 }, { kind: 'all' }],
    ['a key of the wrong type', { t: 'account', id: 5 }, { kind: 'all' }],
  ])('%s', (_name, announcement, expected) => {
    expect(parseChange(JSON.stringify(announcement))).toMatchObject(expected);
  });

  it('takes anything it cannot read as "everything may have changed"', () => {
    expect(parseChange('{not json')).toEqual({ kind: 'all' });
    expect(parseChange('[]')).toEqual({ kind: 'all' });
  });
});

/**
 * The same against the database's triggers and snapshots, with the sign-in written by another
 * connection (on PGlite, the one connection there is).
 */
describe('announced transactions and read snapshots agree', () => {
  const database = useTestDatabase();
  const server = useServer(database);
  let outside: (sql: string, params?: unknown[]) => Promise<void>;
  let client: pg.Client | undefined;
  let org: BuiltOrganization;

  beforeAll(async () => {
    if (testMode === 'postgres') {
      client = new pg.Client({ connectionString: database().url! });
      await client.connect();
      outside = async (sql, params) => void (await client!.query(sql, params));
    } else {
      outside = async (sql, params) => void (await database().sql.query(sql, params));
    }
    org = await createOrganization(database(), { organization: { creditBalance: 10_000 } });
  });
  afterAll(async () => {
    await client?.end();
  });

  const spend = () => outside(`UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1 WHERE "parentId" = $1`, [org.parent.id]);
  const readBalance = async () => {
    const rows = await database().sql.query<{ creditBalance: number; snapshot: string }>(
      `SELECT "creditBalance", pg_current_snapshot()::text AS snapshot FROM "Organization" WHERE "parentId" = $1`,
      [org.parent.id],
    );
    return { rows: rows.map(({ creditBalance }) => ({ creditBalance })), seen: parseSnapshot(rows[0]?.snapshot) };
  };
  /** Until the cache has taken every announcement made so far. */
  /** Until the announcements of earlier writes have arrived. */
  const settled = (cache: EntityCache) => cache.caughtUp();

  it('a read that saw a sign-in is stored and kept, however its announcement and the read interleave', async () => {
    const cache = server().app.deps.cache;
    const key = `test:balance:${org.parent.id}`;
    const before = cache.stats.invalidations;
    const ticket = cache.ticket();
    await spend();
    const { rows, seen } = await readBalance();
    expect(seen).toBeDefined();
    cache.set(ticket, key, rows[0], [cacheTags.organization(org.parent.id)], seen);
    await settled(cache);
    expect(cache.stats.invalidations).toBeGreaterThan(before);
    expect(cache.get(key)?.value).toEqual(rows[0]);
  });

  it('a read that did not see a sign-in is not stored, or is dropped when it is announced', async () => {
    const cache = server().app.deps.cache;
    const key = `test:stale:${org.parent.id}`;
    const ticket = cache.ticket();
    const { rows, seen } = await readBalance();
    await spend();
    cache.set(ticket, key, rows[0], [cacheTags.organization(org.parent.id)], seen);
    await settled(cache);
    expect(cache.get(key)).toBeUndefined();
  });

  it("an account read that saw a sign-in announced while it ran is kept (the read carries its snapshot)", async () => {
    const own = await createOrganization(database());
    // A change committed before the read, whose announcement arrives while the read runs.
    const rows = await database().sql.query<{ version: string }>(
      `WITH changed AS (UPDATE "Account" SET "signInCount" = "signInCount" + 1 WHERE id = $1 RETURNING id) SELECT txid_current()::text AS version FROM changed`,
      [own.parent.id],
    );
    const version = Number(rows[0]!.version);
    const feed = new ManualFeed();
    const sql = database().sql;
    const announcing = { ...sql, kind: sql.kind, query: async (text: string, params?: unknown[]) => {
      const result = await sql.query(text, params);
      feed.announce({ t: 'account', id: own.parent.id, x: version, s: false });
      return result;
    } } as typeof sql;
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 }, announcing);
    const loaded = await createLoaders(database().prisma, cache).accountById.load(own.parent.id);
    expect(loaded?.id).toBe(own.parent.id);
    expect(cache.get(`account:${own.parent.id}`)).toBeDefined();
    // A change the read did not see drops it.
    feed.announce({ t: 'account', id: own.parent.id, x: version + 1_000_000, s: false });
    expect(cache.get(`account:${own.parent.id}`)).toBeUndefined();
    cache.close();
  });

  it("a request's loaders answer what the cache holds without a query, and one value per key until the request ends", async () => {
    const own = await createOrganization(database());
    const feed = new ManualFeed();
    const sql = database().sql;
    let queries = 0;
    const counting = { ...sql, kind: sql.kind, query: async (text: string, params?: unknown[]) => {
      queries += 1;
      return sql.query(text, params);
    } } as typeof sql;
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 }, counting);
    const read = await createLoaders(database().prisma, cache).accountById.load(own.parent.id);
    expect(queries).toBe(1);
    // Each lookup counts once (the metrics' hit ratio), however many steps it took.
    expect(cache.stats).toMatchObject({ hits: 0, misses: 1 });
    // Another request: answered from the cache, and the read recorded for the answer it makes.
    const reads = new ReadSet();
    const request = createLoaders(database().prisma, cache.recording(reads));
    const held = await request.accountById.load(own.parent.id);
    expect(queries).toBe(1);
    expect(held).toEqual(read);
    expect(reads.tags.has(cacheTags.account(own.parent.id))).toBe(true);
    expect(cache.stats).toMatchObject({ hits: 1, misses: 1 });
    // A change announced while that request runs: it keeps what it saw; the next request reads again.
    feed.announce({ t: 'account', id: own.parent.id, s: false });
    expect(await request.accountById.load(own.parent.id)).toBe(held);
    expect(queries).toBe(1);
    await createLoaders(database().prisma, cache).accountById.load(own.parent.id);
    expect(queries).toBe(2);
    expect(cache.stats).toMatchObject({ hits: 1, misses: 2 });
    cache.close();
  });

  it("a child's first sign-in raises its parent's active count at once, without counting again", async () => {
    const own = await createOrganization(database());
    const children = [];
    for (let i = 0; i < 3; i++) children.push(await createChild(database(), own.parent, { lastLogin: i === 0 ? new Date() : null }));
    const token = await tokenFor(own.parent, own);
    const stats = async () => (await rest(server(), '/auth/child-accounts', { token })).body.data.data.stats;
    expect(await stats()).toEqual({ total: 3, active: 1 });
    const cache = server().app.deps.cache;
    for (const [i, child] of children.entries()) {
      await outside(SIGN_IN_SQL, [child.id]);
      await settled(cache);
      const queries = database().queries.count;
      expect(await stats()).toEqual({ total: 3, active: Math.max(1, i + 1) });
      // The page, and the parent's rows the sign-in changed; the counts come from memory.
      expect(database().queries.count - queries).toBeLessThanOrEqual(2);
    }
  });

  it('under a stream of sign-ins the credit analysis shows each one and is mostly answered from memory', async () => {
    const own = await createOrganization(database(), { organization: { creditBalance: 10_000 } });
    const child = await createChild(database(), own.parent);
    const token = await tokenFor(own.parent, own);
    const analysis = async () => (await rest(server(), '/parent/credit-analysis', { token })).body;
    const start = (await analysis()).creditBalance as number;
    const cache = server().app.deps.cache;
    for (let i = 1; i <= 5; i++) {
      await outside(SIGN_IN_SQL, [child.id]);
      await settled(cache);
      const queries = database().queries.count;
      // The first answer after the announcement reads the changed rows; the next ones do not.
      expect((await analysis()).creditBalance).toBe(start - i);
      const afterFirst = database().queries.count;
      for (let j = 0; j < 5; j++) expect((await analysis()).creditBalance).toBe(start - i);
      expect(afterFirst - queries).toBeGreaterThan(0);
      expect(database().queries.count - afterFirst).toBe(0);
    }
  });
});
