import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseChange } from '../src/db/capture/changes.js';
import { cacheTags } from '../src/db/cache-tags.js';
import { EntityCache } from '../src/db/entity-cache.js';
import { ReadSet } from '../src/db/read-set.js';
import { parseSnapshot, sees } from '../src/db/snapshots.js';
import { filterSql, readCounts, type ChildFilters } from '../src/db/child-list.js';
import { ACTIVE_WINDOW_MS } from '../src/domain/activity.js';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { createLoaders } from '../src/db/loaders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { ManualFeed, held } from './helpers/manual-feed.js';

const snapshot = (text: string) => parseSnapshot(text)!;

describe('snapshots', () => {
  it('read as PostgreSQL prints them, and see exactly the transactions committed before them', () => {
    const s = snapshot('100:105:101,103');
    expect(s).toEqual({ xmin: 100, xmax: 105, xip: [101, 103] });
    expect([99, 100, 101, 102, 103, 104, 105].map((x) => sees(s, x))).toEqual([
      true,
      true,
      false,
      true,
      false,
      true,
      false,
    ]);
    expect(parseSnapshot('not a snapshot')).toBeUndefined();
    expect(parseSnapshot(undefined)).toBeUndefined();
  });
});

/**
 * A database that answers every statement with one row: `row`, and the snapshot the test names
 * (what `pg_current_snapshot()` would have said), so that reads can be given any snapshot.
 */
function scriptedDatabase() {
  const script = { row: {} as Record<string, unknown>, snapshot: undefined as string | undefined, statements: 0 };
  const sql = {
    query: async <T>(_text: string, _params?: unknown[]): Promise<T[]> => {
      script.statements += 1;
      return [{ ...script.row, readSnapshot: script.snapshot } as T];
    },
  };
  return { script, sql };
}

describe('the cache with announced transaction ids', () => {
  const tag = cacheTags.organization('USR_p');
  const setup = (now = Date.now()) => {
    const feed = new ManualFeed();
    const { script, sql } = scriptedDatabase();
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 }, sql, () => now);
    /**
     * A read of `key` through the cache: `during` runs once it started (an announcement arriving
     * while it runs), then one statement that saw `snapshot` (none: a read that carries no snapshot).
     */
    const read = (
      key: string,
      options: { snapshot?: string; during?: () => void | Promise<void>; value?: unknown; share?: boolean } = {},
    ) =>
      cache.through(key, {
        tags: [tag],
        read: async (query) => {
          await options.during?.();
          if (options.snapshot !== undefined) {
            script.snapshot = options.snapshot;
            await query('1 AS one', '');
          }
          return options.value ?? 1;
        },
        share: options.share,
      });
    return { feed, cache, script, read };
  };

  it('stores a read that overlapped an announcement only if its snapshot saw the change', async () => {
    const { feed, cache, read } = setup();
    const during = () => feed.announce({ t: 'organization', id: 'USR_p', x: 500, s: false });
    await read('a', { snapshot: '499:499:', during });
    expect(held(cache, 'a')).toBeUndefined();
    await read('b', { snapshot: '500:502:500', during });
    expect(held(cache, 'b')).toBeUndefined();
    await read('c', { during });
    expect(held(cache, 'c')).toBeUndefined();
    expect(await read('d', { snapshot: '501:501:', during })).toBe(1);
    expect(held(cache, 'd')?.value).toBe(1);
    // An announcement without a transaction id (an older trigger) cannot be proven seen.
    await read('e', {
      snapshot: '900:900:',
      during: () => feed.announce({ t: 'organization', id: 'USR_p', s: false }),
    });
    expect(held(cache, 'e')).toBeUndefined();
  });

  it('keeps through an announcement the entries whose snapshot saw it, and drops the others', async () => {
    const { feed, cache, read } = setup();
    await read('seen', { snapshot: '701:701:' });
    await read('unseen', { snapshot: '690:702:700' });
    await read('plain');
    feed.announce({ t: 'organization', id: 'USR_p', x: 700, s: false });
    expect(held(cache, 'seen')?.value).toBe(1);
    expect(held(cache, 'unseen')).toBeUndefined();
    expect(held(cache, 'plain')).toBeUndefined();
    feed.announce({ t: 'organization', id: 'USR_p', x: 705, s: false });
    expect(held(cache, 'seen')).toBeUndefined();
  });

  it('lets callers share a read in flight, but not one that may predate a change they know of', async () => {
    const { feed, read } = setup();
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let ownReads = 0;
    const own = (value: number) => ({ snapshot: '900:900:', value, share: true, during: () => void (ownReads += 1) });
    const first = read('k', { snapshot: '790:790:', during: () => gate, value: 7, share: true });
    const early = read('k', own(70));
    feed.announce({ t: 'organization', id: 'USR_p', x: 800, s: false });
    const late = read('k', own(71));
    open();
    expect(await first).toBe(7);
    expect(await early).toBe(7);
    // The read's snapshot did not see transaction 800, announced before this caller joined: it read for itself.
    expect(await late).toBe(71);
    expect(ownReads).toBe(1);

    let openAgain!: () => void;
    const again = new Promise<void>((resolve) => (openAgain = resolve));
    const second = read('k2', { snapshot: '802:802:', during: () => again, value: 8, share: true });
    feed.announce({ t: 'organization', id: 'USR_p', x: 801, s: false });
    const joined = read('k2', own(80));
    openAgain();
    expect(await second).toBe(8);
    // It did see 801: committed before it began reading, though announced after it was asked.
    expect(await joined).toBe(8);
    expect(ownReads).toBe(1);
  });

  it('amends an entry once a change, however many of its tags the change drops', async () => {
    const { feed, cache } = setup();
    const amended: number[] = [];
    const tags = [cacheTags.childMembers('USR_p'), cacheTags.children('USR_p')];
    await cache.through('members', {
      tags,
      read: async () => 10,
      amend: (count, change) => (amended.push(change.version!), (count ?? 0) + 1),
    });
    // A child added: both tags go.
    feed.announce({ t: 'account', id: 'USR_c', p: 'USR_p', o: 'i', s: true, x: 50 });
    expect(held(cache, 'members')?.value).toBe(11);
    expect(amended).toEqual([50]);
  });

  describe("a parent's child counts", () => {
    const now = Date.UTC(2026, 10, 22);
    const countsOf = (setupNow = now) => {
      const context = setup(setupNow);
      const sources = { cache: context.cache, staleReads: { query: async () => [] }, childCount: async () => 40 };
      /** The counts for `filters` at `at`, and whether they took a statement. */
      const counts = async (filters: ChildFilters, at = now) => {
        const before = context.script.statements;
        const result = await readCounts(sources, filters, undefined, at);
        return { ...result, counted: context.script.statements > before };
      };
      /**
       * What the next statement reads: `active` counted, the oldest of them logged in at `oldest`, seen by
       * `snapshot`.
       */
      const database = (active: number, snapshot?: string, oldest = now - 1000) => {
        context.script.row = { total: null, active, oldest: new Date(oldest) };
        context.script.snapshot = snapshot;
      };
      return { ...context, counts, database };
    };
    const unfiltered = filterSql('USR_p', undefined, {});
    const searched = filterSql('USR_p', 'smith', {});
    const signIn = (before: number | null, after: number, x?: number, stable = false) => {
      const change: Record<string, unknown> = { t: 'account', id: 'USR_c', p: 'USR_p', s: stable, n: after };
      if (before !== null) change.l = before;
      if (x !== undefined) change.x = x;
      return change;
    };

    it('are kept through sign-ins of children who were active and still are', async () => {
      const { feed, counts, database } = countsOf();
      database(1);
      expect(await counts(searched)).toMatchObject({ active: 1, counted: true });
      const recent = now - 1000;
      feed.announce(signIn(recent, now, 1));
      expect(await counts(searched)).toMatchObject({ active: 1, counted: false });
      // A first login, a return after more than 30 days, a change beyond activity: counted again.
      for (const [x, change] of [
        [2, signIn(null, now, 2)],
        [3, signIn(now - ACTIVE_WINDOW_MS - 1, now, 3)],
        [4, signIn(recent, now, 4, true)],
      ] as const) {
        feed.announce(change);
        expect(await counts(searched), `change ${x}`).toMatchObject({ counted: true });
      }
      // An announcement that does not name its transaction may come from older triggers, which
      // sent no logins: counted again.
      feed.announce(signIn(recent, now));
      expect(await counts(searched)).toMatchObject({ counted: true });
    });

    it("take a child's first login in the window into the unfiltered active count, unless the count already has it", async () => {
      const { feed, counts, database } = countsOf();
      database(5, '10:10:');
      expect(await counts(unfiltered)).toMatchObject({ total: 40, active: 5, counted: true });
      expect(await counts(searched)).toMatchObject({ active: 5, counted: true });
      feed.announce(signIn(null, now, 11));
      expect(await counts(unfiltered)).toMatchObject({ total: 40, active: 6, counted: false });
      // A filtered count may or may not include the child: counted again.
      expect(await counts(searched)).toMatchObject({ counted: true });
      // The same child again, now active: no change.
      feed.announce(signIn(now, now + 5, 12));
      expect(await counts(unfiltered)).toMatchObject({ active: 6, counted: false });
      // A count whose snapshot saw the sign-in already has it.
      feed.announce(signIn(null, now, 19, true));
      database(5, '20:20:');
      expect(await counts(unfiltered)).toMatchObject({ active: 5, counted: true });
      feed.announce({ ...signIn(now - ACTIVE_WINDOW_MS - 1, now, 13), id: 'USR_d' });
      expect(await counts(unfiltered)).toMatchObject({ active: 5, counted: false });
      // A child becoming inactive by a write: counted again.
      feed.announce({ ...signIn(now, now - ACTIVE_WINDOW_MS - 1, 31), id: 'USR_e' });
      database(4, '40:40:');
      expect(await counts(unfiltered)).toMatchObject({ active: 4, counted: true });
    });

    it('past its validity, an unfiltered count is counted again rather than amended', async () => {
      const { feed, counts, database } = countsOf();
      // Counted 10 ms ago, holding until 5 ms ago (the oldest counted login has left the window since).
      database(5, '10:10:', now - 5 - ACTIVE_WINDOW_MS);
      expect(await counts(unfiltered, now - 10)).toMatchObject({ active: 5, counted: true });
      expect(await counts(unfiltered, now - 10)).toMatchObject({ counted: false });
      feed.announce(signIn(null, now, 21));
      // Asked at the moment it was made for, it is read again: the sign-in dropped it.
      expect(await counts(unfiltered, now - 10)).toMatchObject({ counted: true });
    });
  });
});

describe('announcements, parsed once into a typed change', () => {
  it.each([
    [
      'a row change',
      { t: 'account', id: 'USR_a', x: 7, k: 'APK_a_1', p: 'USR_p', s: false, l: 1, n: 2 },
      {
        kind: 'row',
        entity: 'account',
        id: 'USR_a',
        version: 7,
        publicKey: 'APK_a_1',
        parentId: 'USR_p',
        stable: false,
        lastLogin: { before: 1, after: 2 },
      },
    ],
    [
      'never logged in before',
      { t: 'account', id: 'USR_a', x: 7, p: 'USR_p', s: false, n: 2 },
      { kind: 'row', stable: false, lastLogin: { before: null, after: 2 } },
    ],
    [
      'no transaction: logins unknown',
      { t: 'account', id: 'USR_a', p: 'USR_p', s: false, n: 2 },
      { kind: 'row', version: undefined, lastLogin: undefined },
    ],
    [
      'stable unless said otherwise',
      { t: 'organization', id: 'USR_p', x: 1 },
      { kind: 'row', entity: 'organization', stable: true },
    ],
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

  const spend = () =>
    outside(`UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1 WHERE "parentId" = $1`, [org.parent.id]);
  /**
   * The organization's balance read through `cache` under `key`, with a sign-in committed before or after the
   * statement.
   */
  const readBalance = (cache: EntityCache, key: string, signIn: 'before' | 'after') =>
    cache.through(key, {
      tags: [cacheTags.organization(org.parent.id)],
      read: async (query) => {
        if (signIn === 'before') await spend();
        const [row] = await query<{ creditBalance: number }>(
          '"creditBalance"',
          'FROM "Organization" WHERE "parentId" = $1',
          [org.parent.id],
        );
        if (signIn === 'after') await spend();
        return row;
      },
    });
  /** Until the announcements of earlier writes have arrived. */
  const settled = (cache: EntityCache) => cache.caughtUp();

  it('a read that saw a sign-in is stored and kept, however its announcement and the read interleave', async () => {
    const cache = server().app.deps.cache;
    const key = `test:balance:${org.parent.id}`;
    const before = cache.stats.invalidations;
    const read = await readBalance(cache, key, 'before');
    await settled(cache);
    expect(cache.stats.invalidations).toBeGreaterThan(before);
    expect(held(cache, key)?.value).toEqual(read);
  });

  it('a read that did not see a sign-in is not stored, or is dropped when it is announced', async () => {
    const cache = server().app.deps.cache;
    const key = `test:stale:${org.parent.id}`;
    await readBalance(cache, key, 'after');
    await settled(cache);
    expect(held(cache, key)).toBeUndefined();
  });

  it('an account read that saw a sign-in announced while it ran is kept (the read carries its snapshot)', async () => {
    const own = await createOrganization(database());
    // A change committed before the read, whose announcement arrives while the read runs.
    const rows = await database().sql.query<{ version: string }>(
      `WITH changed AS (UPDATE "Account" SET "signInCount" = "signInCount" + 1 WHERE id = $1 RETURNING id) SELECT txid_current()::text AS version FROM changed`,
      [own.parent.id],
    );
    const version = Number(rows[0]!.version);
    const feed = new ManualFeed();
    const sql = database().sql;
    const announcing = {
      ...sql,
      kind: sql.kind,
      query: async (text: string, params?: unknown[]) => {
        const result = await sql.query(text, params);
        feed.announce({ t: 'account', id: own.parent.id, x: version, s: false });
        return result;
      },
    } as typeof sql;
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 }, announcing);
    const loaded = await createLoaders(database().prisma, cache).accountById.load(own.parent.id);
    expect(loaded?.id).toBe(own.parent.id);
    expect(held(cache, `account:${own.parent.id}`)).toBeDefined();
    // A change the read did not see drops it.
    feed.announce({ t: 'account', id: own.parent.id, x: version + 1_000_000, s: false });
    expect(held(cache, `account:${own.parent.id}`)).toBeUndefined();
    cache.close();
  });

  it("a request's loaders answer what the cache holds without a query, and one value per key until the request ends", async () => {
    const own = await createOrganization(database());
    const feed = new ManualFeed();
    const sql = database().sql;
    let queries = 0;
    const counting = {
      ...sql,
      kind: sql.kind,
      query: async (text: string, params?: unknown[]) => {
        queries += 1;
        return sql.query(text, params);
      },
    } as typeof sql;
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

  it("different requests' misses in one turn share one statement; a change the statement did not see stores none of them", async () => {
    const own = await createOrganization(database());
    const children = [
      await createChild(database(), own.parent),
      await createChild(database(), own.parent),
      await createChild(database(), own.parent),
    ];
    const feed = new ManualFeed();
    const sql = database().sql;
    const statements: unknown[][] = [];
    let announce: (() => void) | undefined;
    const driver = {
      ...sql,
      kind: sql.kind,
      query: async (text: string, params?: unknown[]) => {
        statements.push(params ?? []);
        const result = await sql.query(text, params);
        announce?.();
        return result;
      },
    } as typeof sql;
    const cache = new EntityCache(feed, { maxEntries: 100, maxBytes: 1 << 20, ttlMs: 60_000 }, driver);
    // Three requests, each with its own loaders, missing three accounts at once.
    const loaded = await Promise.all(
      children.map((child) => createLoaders(database().prisma, cache).accountById.load(child.id)),
    );
    expect(loaded.map((account) => account?.id)).toEqual(children.map((child) => child.id));
    expect(statements).toHaveLength(1);
    expect(statements[0]![0]).toEqual(expect.arrayContaining(children.map((child) => child.id)));
    for (const child of children) expect(held(cache, `account:${child.id}`)).toBeDefined();
    // A request in a later turn makes its own statement.
    const [other] = [await createChild(database(), own.parent)];
    await createLoaders(database().prisma, cache).accountById.load(other!.id);
    expect(statements).toHaveLength(2);
    // A change to one of them, announced while their shared statement runs and not seen by it
    // (its transaction id is past the read's snapshot): each request gets the row it read, and
    // the changed row is not stored (the others are).
    for (const child of children) feed.announce({ t: 'account', id: child.id, s: false });
    announce = () => {
      feed.announce({ t: 'account', id: children[0]!.id, x: 2 ** 40, s: false });
      announce = undefined;
    };
    const again = await Promise.all(
      children.map((child) => createLoaders(database().prisma, cache).accountById.load(child.id)),
    );
    expect(again.map((account) => account?.id)).toEqual(children.map((child) => child.id));
    expect(statements).toHaveLength(3);
    expect(held(cache, `account:${children[0]!.id}`)).toBeUndefined();
    expect(held(cache, `account:${children[1]!.id}`)).toBeDefined();
    cache.close();
  });

  it("a child's first sign-in raises its parent's active count at once, without counting again", async () => {
    const own = await createOrganization(database());
    const children = [];
    for (let i = 0; i < 3; i++)
      children.push(await createChild(database(), own.parent, { lastLogin: i === 0 ? new Date() : null }));
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
