import { z } from 'zod';
import type { ParentViewer } from '../auth/authorize.js';
import { isoTime, parseDateRange } from '../domain/dates.js';
import { decodePageToken, encodePageToken, type PageScope, type Position } from '../domain/pagination.js';
import { InvalidLimitError, InvalidSearchError } from '../errors.js';
import { cacheTags } from '../db/cache-tags.js';
import { MISS } from '../db/entity-cache.js';
import type { SnapshotQuery } from '../db/snapshots.js';
import { childCountsKey, type ChildCounts } from '../db/child-list-changes.js';
import { ACTIVE_WINDOW_MS } from '../domain/activity.js';
import type { ServiceContext } from './context.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 100;
export const MAX_SEARCH_LENGTH = 200;

/** The child list's input, shared by both transports (decisions §4). */
export const ListChildAccountsInput = z.object({
  search: z.string().optional(),
  startDate: z.string().optional(),
  endDate: z.string().optional(),
  limit: z.number().optional(),
  after: z.string().optional(),
  /** Relay's names (GraphQL): `first` is `limit`; `last` and `before` page backwards. */
  first: z.number().optional(),
  last: z.number().optional(),
  before: z.string().optional(),
});
export type ListChildAccountsInput = z.infer<typeof ListChildAccountsInput>;

export type ChildAccountListItem = {
  /** The child's userID. */
  accountId: string;
  username: string;
  email: string;
  /** Last login as ISO 8601, formatted once when the page was read; null when the child never logged in. */
  lastSeenIso: string | null;
  /** Registration time as ISO 8601, formatted once when the page was read. */
  registeredIso: string;
  /** The page token that continues after this row. */
  cursor: string;
};

export type ChildAccountPage = {
  /** Newest first, whichever way the page was read. */
  accounts: ChildAccountListItem[];
  limit: number;
  /** Read forwards (`first`/`limit`): whether older children follow. */
  hasMore: boolean;
  /** Present when hasMore. */
  nextPageToken: string | undefined;
  /**
   * Relay's page info: whether older children follow the page (`hasNextPage`) and newer ones
   * precede it (`hasPreviousPage`). The side the page was read towards is known from the read; the
   * other side is asked of the database (one indexed probe), only when asked for.
   */
  hasNextPage: () => Promise<boolean>;
  hasPreviousPage: () => Promise<boolean>;
  /** Counts of all children matching the filters (not just the page); computed on demand. */
  stats: () => Promise<{ total: number; active: number }>;
};

/** A page row as read: times as epoch milliseconds, a number being far cheaper for the driver. */
export type ChildRow = { id: string; username: string; email: string; lastLoginMs: number | null; createdAtMs: number };

/**
 * A page row with its times formatted: what the cached first page holds, so that the many
 * requests answered from one read format them once (and the cache's size estimate counts them).
 */
type ListedRow = ChildRow & { lastSeenIso: string | null; registeredIso: string };

function formatted(rows: ChildRow[]): ListedRow[] {
  return rows.map((row) => ({
    ...row,
    lastSeenIso: isoTime(row.lastLoginMs),
    registeredIso: isoTime(row.createdAtMs),
  }));
}

/**
 * Cursors signed, by the row they continue after and the list they belong to: the cached first
 * page's rows are shared by every request that reads the page, so each of its cursors is signed
 * once, not on every request (an HMAC each, twice a request for the page's last one: 5 % of the
 * dashboard query's busy CPU). The value does not refer to the row, so a row read for one request
 * is collected with its entry.
 */
const signed = new WeakMap<ListedRow, { scope: PageScope; key: string | Uint8Array; cursor: string }>();

/** A row of the list; a class, not an object literal with a getter, which V8 builds far slower. */
class ListedChild implements ChildAccountListItem {
  readonly accountId: string;
  readonly username: string;
  readonly email: string;
  readonly lastSeenIso: string | null;
  readonly registeredIso: string;
  readonly #row: ListedRow;
  readonly #scope: PageScope;
  readonly #key: string | Uint8Array;

  constructor(row: ListedRow, scope: PageScope, key: string | Uint8Array) {
    this.accountId = row.id;
    this.username = row.username;
    this.email = row.email;
    this.lastSeenIso = row.lastSeenIso;
    this.registeredIso = row.registeredIso;
    this.#row = row;
    this.#scope = scope;
    this.#key = key;
  }

  /** Signed on demand: REST needs only the last one, GraphQL only the cursors it is asked for. */
  get cursor(): string {
    const known = signed.get(this.#row);
    if (known !== undefined && known.scope === this.#scope && known.key === this.#key) return known.cursor;
    const cursor = encodePageToken({ createdAt: new Date(this.#row.createdAtMs), id: this.accountId }, this.#scope, this.#key);
    signed.set(this.#row, { scope: this.#scope, key: this.#key, cursor });
    return cursor;
  }
}

/** The page size and direction: at most one of `limit`, `first` (forwards) and `last` (backwards). */
function validSize(input: ListChildAccountsInput): { size: number; backwards: boolean } {
  const given = [input.limit, input.first, input.last].filter((n) => n !== undefined).length;
  if (given > 1) throw new InvalidLimitError('Give one of limit, first and last.');
  const size = input.limit ?? input.first ?? input.last ?? DEFAULT_LIMIT;
  if (!Number.isInteger(size) || size < 1 || size > MAX_LIMIT) {
    throw new InvalidLimitError(`${input.first !== undefined ? 'first' : input.last !== undefined ? 'last' : 'limit'} must be a whole number from 1 to 100.`);
  }
  return { size, backwards: input.last !== undefined };
}

export function validSearch(search: string | undefined): string | undefined {
  if (search === undefined) return undefined;
  const trimmed = search.trim();
  if (trimmed.length > MAX_SEARCH_LENGTH) throw new InvalidSearchError();
  if (trimmed.includes('\u0000')) throw new InvalidSearchError('search must be valid UTF-8 without NUL characters.');
  return trimmed === '' ? undefined : trimmed;
}

/** ILIKE pattern characters match themselves (decisions §4). */
function escapeLike(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

type Stats = { total: number; active: number };
/**
 * Cached counts: valid while no child of the parent changes and no counted login leaves the
 * window (a child becoming active adds one to the unfiltered count in place, see `db/child-list-changes.ts`).
 * `total` is null when unfiltered (the organization's child count is used instead).
 */
type CachedStats = ChildCounts;

/**
 * The filters (decisions §4) as SQL on Account: its WHERE clause with parameters from `$1`, the
 * scope that page tokens are bound to, and the key their counts are cached under. A search is
 * `ILIKE` on the names, which the trigram indexes serve (pg_trgm folds case).
 */
export function filterSql(parentId: string, search: string | undefined, range: { from?: Date; to?: Date }) {
  const params: unknown[] = [parentId];
  const clauses = ['"parentId" = $1'];
  if (range.from) clauses.push(`"createdAt" >= $${params.push(range.from)}`);
  if (range.to) clauses.push(`"createdAt" <= $${params.push(range.to)}`);
  const unsearched = clauses.join(' AND ');
  let match: string | undefined;
  if (search) {
    const n = params.push(`%${escapeLike(search)}%`);
    match = `(username ILIKE $${n} OR email ILIKE $${n})`;
    clauses.push(match);
  }
  // The normalised filters: two requests with the same scope select the same rows.
  const scope: PageScope = `${parentId}|${range.from?.getTime() ?? ''}|${range.to?.getTime() ?? ''}|${search ?? ''}`;
  const filtered = clauses.length > 1;
  return {
    where: clauses.join(' AND '),
    /** The search alone (undefined without one), and the other filters without it. */
    match,
    unsearched,
    /** Whether the trigram indexes can serve the search: it holds three characters at least. */
    indexable: search !== undefined && [...search].length >= 3,
    params,
    filtered,
    scope,
    cacheKey: filtered ? `stats:${scope}` : childCountsKey(parentId),
  };
}

/** The child list's filters as SQL (see `filterSql`). */
export type ChildFilters = ReturnType<typeof filterSql>;

/**
 * A keyset condition on the (parentId, createdAt DESC, id DESC) index: rows whose (registration,
 * id) compare to `position` as `op` says, its values added to `params`.
 */
export function keysetCondition(params: unknown[], position: Position, op: '<' | '>' | '<=' | '>='): string {
  return ` AND ("createdAt", id) ${op} ($${params.push(position.createdAt)}, $${params.push(position.id)})`;
}

/** The statement of one page: `keyset` the conditions after the filters, `limit` the parameter of the row count. */
export function pageStatement(filters: ChildFilters, keyset: string, order: 'ASC' | 'DESC', limit: string): { columns: string; sorted: string; rest: string } {
  const columns = `id, username, email,
            (extract(epoch FROM "lastLogin") * 1000)::float8 AS "lastLoginMs",
            (extract(epoch FROM "createdAt") * 1000)::float8 AS "createdAtMs"`;
  const sorted = registrationOrder(order, limit);
  return { columns, sorted, rest: `FROM "Account" WHERE ${filters.where}${keyset} ${sorted}` };
}

/** Registration order (newest first with DESC), ties by id: the order of every child list. */
function registrationOrder(order: 'ASC' | 'DESC', limit: string | number): string {
  return `ORDER BY "createdAt" ${order}, id ${order} LIMIT ${limit}`;
}

/** A parent's children, newest registration first, keyset-paginated (spec: GET /auth/child-accounts). */
export async function listChildAccounts(
  viewer: ParentViewer,
  input: ListChildAccountsInput,
  context: ServiceContext,
): Promise<ChildAccountPage> {
  const parentId = viewer.account.id;
  const { size: limit, backwards } = validSize(input);
  const search = validSearch(input.search);
  const range = parseDateRange(input.startDate, input.endDate);
  const key = context.paginationSecret ?? viewer.organization.jwtSecret;
  const filters = filterSql(parentId, search, range);
  // decisions §4: a token continues only the list it was issued for (same parent, same filters).
  const after: Position | undefined =
    input.after === undefined ? undefined : decodePageToken(input.after, filters.scope, key);
  const before: Position | undefined =
    input.before === undefined ? undefined : decodePageToken(input.before, filters.scope, key);

  const params = [...filters.params];
  // Row comparisons: range conditions on the (parentId, createdAt DESC, id DESC) index, read
  // forwards (older) from `after` or backwards (newer) from `before`.
  const keyset = (after ? keysetCondition(params, after, '<') : '') + (before ? keysetCondition(params, before, '>') : '');
  const order = backwards ? 'ASC' : 'DESC';
  const statement = pageStatement(filters, keyset, order, `$${params.push(limit + 1)}`);
  // The unfiltered first page is what dashboards poll: cached until a child of the parent is added,
  // removed or changed in anything but its activity, or a child it shows signs in (its rows' own
  // tags); one entry per parent and limit, so no caller can fill the cache with pages of its
  // choosing; read on the primary. Other pages are read where bounded staleness is allowed (a replica
  // when one is usable: at most REPLICA_MAX_LAG_MS behind).
  const rows =
    filters.match !== undefined
      ? await searchPage(filters, keyset, statement, { params, limit, order }, context)
      : filters.filtered || after || before || backwards
      ? formatted(await context.staleReads.query<ChildRow>(`SELECT ${statement.columns} ${statement.rest}`, params))
      : await context.cache.through(
          `firstPage:${parentId}|${limit}`,
          // The row read past the page tells only that more follow: its activity shows nowhere.
          (page: ListedRow[]) => [cacheTags.childRows(parentId), ...page.slice(0, limit).map((row) => cacheTags.account(row.id))],
          async (query) => formatted(await query<ChildRow>(statement.columns, statement.rest, params)),
          { share: true },
        );
  const more = rows.length > limit;
  const read = rows.slice(0, limit);
  if (backwards) read.reverse();
  const accounts = read.map((row) => new ListedChild(row, filters.scope, key));
  const hasMore = !backwards && more;
  // Whether any matching child lies beyond `position` on the far side of the page (inclusive: the
  // cursor's own row, if it still exists, is not on the page).
  const beyond = async (position: Position | undefined, op: '>=' | '<=') => {
    if (!position) return false;
    const probe = [...filters.params];
    const [row] = await context.staleReads.query<{ found: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM "Account" WHERE ${filters.where}${keysetCondition(probe, position, op)}) AS found`,
      probe,
    );
    return row?.found === true;
  };
  let stats: Promise<Stats> | undefined;
  let newer: Promise<boolean> | undefined;
  let older: Promise<boolean> | undefined;
  return {
    accounts,
    limit,
    hasMore,
    nextPageToken: hasMore ? accounts[accounts.length - 1]?.cursor : undefined,
    hasNextPage: () => (backwards ? (older ??= beyond(before, '<=')) : Promise.resolve(more)),
    hasPreviousPage: () => (backwards ? Promise.resolve(more) : (newer ??= beyond(after, '>='))),
    stats: () => (stats ??= countChildren(viewer, filters, context)),
  };
}

/** Children a search page reads in registration order before it looks its matches up instead. */
export const SEARCH_WALK_ROWS = 500;

/**
 * One page of a search. Walking the parent's children in registration order stops as soon as the
 * page is full: cheap when the search matches many, a walk through every child when it matches
 * few. Looking the matches up in the trigram indexes (which hold the parent) reads only the
 * matches, then sorts them: cheap when they are few. PostgreSQL's estimate of how many a
 * substring matches is too rough to choose between the two (it walked 5,600 rows for a name that
 * 0.4 % of 100,000 children have: 11 ms where the lookup takes 2 ms), so the page chooses by what
 * it sees: it walks at most SEARCH_WALK_ROWS children first, which fills the page when matches
 * are common; otherwise the matches found there estimate how many the parent has, and the
 * cheaper of a whole walk and the lookup (which needs three characters) reads the page. When the
 * search's counts are cached, they tell how many match without the walk.
 */
async function searchPage(
  filters: ChildFilters,
  keyset: string,
  statement: ReturnType<typeof pageStatement>,
  page: { params: unknown[]; limit: number; order: 'ASC' | 'DESC' },
  context: ServiceContext,
): Promise<ListedRow[]> {
  const { params, limit, order } = page;
  const { columns, sorted } = statement;
  const parentId = String(filters.params[0]);
  // The lookup reads the matches; the walk reads about (limit + 1) * children / matches rows.
  const read = async (matches: number, children: number) => {
    const lookUp = filters.indexable && matches < ((limit + 1) * children) / matches;
    // OFFSET 0 keeps the planner from walking the registration index to honour the ORDER BY.
    const text = lookUp
      ? `SELECT ${columns} FROM (SELECT * FROM "Account" WHERE ${filters.where}${keyset} OFFSET 0) AS "Account" ${sorted}`
      : `SELECT ${columns} ${statement.rest}`;
    return formatted(await context.staleReads.query<ChildRow>(text, params));
  };
  const children = async () => (await context.loaders.childCountByParentId.load(parentId)) ?? 0;
  // How many children match, when the search's counts are cached (a search asked again, its
  // counts asked with its first page): the choice needs no walk.
  const counted = context.cache.hit<ChildCounts>('', filters.cacheKey, () => [cacheTags.children(parentId)]);
  if (counted !== MISS && counted !== null && counted.total !== null) {
    return counted.total === 0 ? [] : read(counted.total, await children());
  }
  const walked = await context.staleReads.query<ChildRow>(
    `SELECT ${columns} FROM (SELECT * FROM "Account" WHERE ${filters.unsearched}${keyset} ${registrationOrder(order, SEARCH_WALK_ROWS)}) AS "Account"
     WHERE ${filters.match} ${sorted}`,
    params,
  );
  if (walked.length > limit) return formatted(walked);
  const total = await children();
  return read((Math.max(walked.length, 0.5) / SEARCH_WALK_ROWS) * total, total);
}

/**
 * stats.total and stats.active (decisions §4) for the filters. Counting can touch every child of
 * a large parent, so the result is cached until a child of this parent changes (the database
 * announces it) or the oldest login counted as active leaves the 30-day window.
 */
async function countChildren(
  viewer: ParentViewer,
  filters: ChildFilters,
  context: ServiceContext,
): Promise<Stats> {
  const parentId = viewer.account.id;
  const clock = context.clock();
  const now = clock.now.getTime();
  // With the snapshot: a count that already saw a sign-in announced meanwhile is still stored.
  const counted = await context.cache.through(filters.cacheKey, [cacheTags.children(parentId)], (query) => queryCounts(filters, now, query), {
    share: true,
    usable: (hit) => now >= hit.computedAt && now < hit.validUntil,
  });
  // The active count holds until its oldest login leaves the window.
  clock.holdsUntil(counted.validUntil);
  // Unfiltered, the total is the parent's child count, kept exact on its own (see `childCountByParentId`).
  return { total: counted.total ?? (await context.loaders.childCountByParentId.load(parentId)), active: counted.active };
}

/** One query for the counts of `countChildren`, kept with the moment the active ones expire. */
async function queryCounts(filters: ChildFilters, now: number, query: SnapshotQuery): Promise<CachedStats> {
  const params = [...filters.params];
  const cutoff = `$${params.push(new Date(now - ACTIVE_WINDOW_MS))}`;
  // Unfiltered, the total is the parent's kept child count: only the active ones are counted.
  const total = filters.filtered ? 'count(*)::int' : 'NULL::int';
  const where = filters.filtered ? filters.where : `${filters.where} AND "lastLogin" >= ${cutoff}`;
  const [row] = await query<{ total: number | null; active: number; oldest: Date | null }>(
    `${total} AS total, count(*) FILTER (WHERE "lastLogin" >= ${cutoff})::int AS active,
     min("lastLogin") FILTER (WHERE "lastLogin" >= ${cutoff}) AS oldest`,
    `FROM "Account" WHERE ${where}`,
    params,
  );
  return {
    total: row?.total ?? null,
    active: row?.active ?? 0,
    computedAt: now,
    validUntil: row?.oldest ? row.oldest.getTime() + ACTIVE_WINDOW_MS : Number.POSITIVE_INFINITY,
  };
}
