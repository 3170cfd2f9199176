import { isoTime } from '../domain/dates.js';
import type { PageScope, Position } from '../domain/pagination.js';
import { ACTIVE_WINDOW_MS, activityShift } from '../domain/activity.js';
import type { RowChange } from './capture/changes.js';
import { cacheTags } from './cache-tags.js';
import { MISS, type CacheReader } from './entity-cache.js';
import type { ReadQuery } from './replicas.js';
import type { SearchReads } from './search-reads.js';
import type { SnapshotQuery } from './snapshots.js';

/* A parent's children as the database reads them: filters, keyset pages, search plans, counts, and their caching. */

/**
 * A parent's child counts as cached: `total` null when the organization's child count holds it; valid until the oldest
 * active login leaves the window.
 */
export type ChildCounts = { total: number | null; active: number; computedAt: number; validUntil: number };

/** A page row as read: times as epoch milliseconds, a number being far cheaper for the driver. */
export type ChildRow = { id: string; username: string; email: string; lastLoginMs: number | null; createdAtMs: number };

/** A page row with its times formatted once, for the cached first page that many requests share. */
export type ListedRow = ChildRow & { lastSeenIso: string | null; registeredIso: string };

function formatted(rows: ChildRow[]): ListedRow[] {
  return rows.map((row) => ({
    ...row,
    lastSeenIso: isoTime(row.lastLoginMs),
    registeredIso: isoTime(row.createdAtMs),
  }));
}

/** ILIKE pattern characters match themselves (decisions §4). */
function escapeLike(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/**
 * The filters (decisions §4) as SQL on Account, with the scope page tokens are bound to. A search is
 * `ILIKE`, served by the trigram indexes from three characters and by the grams index below that.
 */
export function filterSql(parentId: string, search: string | undefined, range: { from?: Date; to?: Date }) {
  const params: unknown[] = [parentId];
  const clauses = ['"parentId" = $1'];
  if (range.from) clauses.push(`"createdAt" >= $${params.push(range.from)}`);
  if (range.to) clauses.push(`"createdAt" <= $${params.push(range.to)}`);
  const unsearched = clauses.join(' AND ');
  let match: string | undefined;
  let scanWhere: string | undefined;
  let n = 0;
  if (search) {
    n = params.push(`%${escapeLike(search)}%`);
    match = `(username ILIKE $${n} OR email ILIKE $${n})`;
    // The same rows for a scan of most children: the pattern is lower-cased once a statement rather
    // than per row, and a caseless term is matched as stored (figures: test/bench/README.md).
    const lowered = `lower($${n}::text)`;
    const caseless = /^[\x00-\x40\x5b-\x60\x7b-\x7f]*$/.test(search);
    const asStored = `username LIKE ${lowered} OR email LIKE ${lowered}`;
    scanWhere = [
      ...clauses,
      caseless ? `(${asStored})` : `(${asStored} OR lower(username) LIKE ${lowered} OR lower(email) LIKE ${lowered})`,
    ].join(' AND ');
    clauses.push(match);
  }
  const where = clauses.join(' AND ');
  const short = search !== undefined && [...search].length <= 2;
  // Every gram of the lower-cased term is one of the names': the index finds candidates, ILIKE decides.
  const grams = (statementParams: unknown[]): string => {
    const t = `$${statementParams.push(search)}::text`;
    return `"child_search_grams"(lower(username) || chr(1) || lower(email)) @> (CASE WHEN length(lower(${t})) <= 2 THEN ARRAY[lower(${t})] ELSE "child_search_grams"(lower(${t})) END)`;
  };
  const lookupWhere = (statementParams: unknown[]): string =>
    short ? `${where} AND ${grams(statementParams)}` : where;
  // A term of one or two characters is itself a gram, so the index alone decides (unless it holds the
  // names' separator). The ILIKE parameter stays, named by a condition the planner folds away.
  const gramWhere =
    short && !search.includes('\u0001')
      ? (statementParams: unknown[]): string =>
          `${unsearched} AND $${n}::text IS NOT NULL AND ${grams(statementParams)}`
      : undefined;
  // The normalised filters: two requests with the same scope select the same rows.
  const scope: PageScope = `${parentId}|${range.from?.getTime() ?? ''}|${range.to?.getTime() ?? ''}|${search ?? ''}`;
  const filtered = clauses.length > 1;
  return {
    parentId,
    where,
    /** The search alone (undefined without one), and the other filters without it. */
    match,
    unsearched,
    /**
     * `where` as an index lookup of the matches: only for a search seen to be rare (a scan finds a common one at once).
     */
    lookupWhere,
    /** `lookupWhere` without the ILIKE the grams index decides (a term of one or two characters). */
    gramWhere,
    /** `where` for a search seen to match most children (see `countedWhere`). */
    scanWhere: scanWhere ?? where,
    params,
    filtered,
    dated: range.from !== undefined || range.to !== undefined,
    scope,
    cacheKey: `stats:${scope}`,
  };
}

export type ChildFilters = ReturnType<typeof filterSql>;

/** A keyset condition on (parentId, createdAt DESC, id DESC): rows that compare to `position` as `op` says. */
function keysetCondition(params: unknown[], position: Position, op: '<' | '>' | '<=' | '>='): string {
  return ` AND ("createdAt", id) ${op} ($${params.push(position.createdAt)}, $${params.push(position.id)})`;
}

/** The statement of one page: `keyset` the conditions after the filters, `limit` the parameter of the row count. */
function pageStatement(
  filters: ChildFilters,
  keyset: string,
  order: 'ASC' | 'DESC',
  limit: string,
): { columns: string; sorted: string; rest: string } {
  const columns = `id, username, email,
            (extract(epoch FROM "lastLogin") * 1000)::float8 AS "lastLoginMs",
            (extract(epoch FROM "createdAt") * 1000)::float8 AS "createdAtMs"`;
  const sorted = registrationOrder(order, limit);
  return { columns, sorted, rest: `FROM "Account" WHERE ${filters.where}${keyset} ${sorted}` };
}

/** Registration order (newest first with DESC), ties by id, with an optional row count. */
function registrationOrder(order: 'ASC' | 'DESC', limit?: string | number): string {
  const sorted = `ORDER BY "createdAt" ${order}, id ${order}`;
  return limit === undefined ? sorted : `${sorted} LIMIT ${limit}`;
}

/** What the child list reads through: the entity cache, the reads that tolerate staleness, the parent's child count. */
export type ChildListSources = {
  cache: CacheReader;
  staleReads: ReadQuery;
  childCount: (parentId: string) => Promise<number>;
  /** A search's statements, bounded in time and in number (`search-reads.ts`); without it, as the others. */
  search?: SearchReads;
};

/** Where a list's uncached statements read: a search's bounded reads, or the stale reads. */
const staleFor = (sources: ChildListSources, filters: ChildFilters): ReadQuery =>
  filters.match !== undefined && sources.search ? sources.search.stale : sources.staleReads;

/** Where a page starts and which way it reads: after `after` (older) or before `before` (newer, `backwards`). */
export type PagePosition = {
  after?: Position | undefined;
  before?: Position | undefined;
  backwards: boolean;
  limit: number;
};

/**
 * One page's rows plus one telling that more follow. The unfiltered first page, which dashboards
 * poll, is cached per parent and limit; other pages read where bounded staleness is allowed.
 */
export async function readPage(
  sources: ChildListSources,
  filters: ChildFilters,
  position: PagePosition,
): Promise<Page> {
  const { after, before, backwards, limit } = position;
  const { parentId } = filters;
  const params = [...filters.params];
  const keyset =
    (after ? keysetCondition(params, after, '<') : '') + (before ? keysetCondition(params, before, '>') : '');
  const order = backwards ? 'ASC' : 'DESC';
  const statement = pageStatement(filters, keyset, order, `$${params.push(limit + 1)}`);
  if (filters.match !== undefined) return searchPage(filters, keyset, statement, { params, limit, order }, sources);
  if (filters.filtered || after || before || backwards)
    return {
      rows: formatted(
        await sources.staleReads.query<ChildRow>(`SELECT ${statement.columns} ${statement.rest}`, params),
      ),
    };
  const rows = await sources.cache.through(`firstPage:${parentId}|${limit}`, {
    // The row read past the page tells only that more follow: its activity shows nowhere.
    tags: (page: ListedRow[]) => [
      cacheTags.childRows(parentId),
      ...page.slice(0, limit).map((row) => cacheTags.account(row.id)),
    ],
    read: async (query) => formatted(await query<ChildRow>(statement.columns, statement.rest, params)),
    share: true,
  });
  return { rows };
}

/** Up to `limit` children older than `after`: a batch of an export, never cached. */
export function readBatch(
  staleReads: ReadQuery,
  filters: ChildFilters,
  after: Position | undefined,
  limit: number,
): Promise<ChildRow[]> {
  const params = [...filters.params];
  const keyset = after ? keysetCondition(params, after, '<') : '';
  const statement = pageStatement(filters, keyset, 'DESC', `$${params.push(limit)}`);
  return staleReads.query<ChildRow>(`SELECT ${statement.columns} ${statement.rest}`, params);
}

/** Whether any matching child lies beyond `position` (the cursor's own row is not on the page). */
export async function existsBeyond(
  sources: ChildListSources,
  filters: ChildFilters,
  share: MatchShare,
  position: Position,
  op: '>=' | '<=',
): Promise<boolean> {
  const probe = [...filters.params];
  const [row] = await staleFor(sources, filters).query<{ found: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM "Account" WHERE ${countedWhere(filters, share, probe)}${keysetCondition(probe, position, op)}) AS found`,
    probe,
  );
  return row?.found === true;
}

/** The share of the parent's children a search matched, as its page estimated it; it picks the counts' plan. */
export type MatchShare = number | undefined;

/** A page's rows (one past the limit when more follow), and what its read saw of the search. */
export type Page = { rows: ListedRow[]; share?: MatchShare };

/** Children a search page reads in registration order before it looks its matches up instead. */
export const SEARCH_WALK_ROWS = 500;

/**
 * Below this share of matches, a search is counted from an index rather than a scan (figures: test/bench/README.md).
 */
const LOOKUP_SHARE = 0.25;

/**
 * Below this share, a one- or two-character term is counted from the grams index alone (figures: test/bench/README.md).
 */
const GRAM_COUNT_SHARE = 0.6;

/** The filters for a count or a probe: an index lookup when the matches are few, a scan when they are most. */
const countedWhere = (filters: ChildFilters, share: MatchShare, params: unknown[]): string => {
  const { gramWhere } = filters;
  if (share === undefined) return filters.where;
  if (share >= (gramWhere && !filters.dated ? GRAM_COUNT_SHARE : LOOKUP_SHARE)) return filters.scanWhere;
  return gramWhere ? gramWhere(params) : filters.lookupWhere(params);
};

/**
 * One page of a search. PostgreSQL's estimate of a substring's matches is too rough to choose between
 * walking in registration order and an index lookup, so the page walks SEARCH_WALK_ROWS children
 * first and chooses by the matches it saw (or by the search's cached count).
 */
async function searchPage(
  filters: ChildFilters,
  keyset: string,
  statement: ReturnType<typeof pageStatement>,
  page: { params: unknown[]; limit: number; order: 'ASC' | 'DESC' },
  sources: ChildListSources,
): Promise<Page> {
  const { params, limit, order } = page;
  const { columns, sorted } = statement;
  const { parentId } = filters;
  const reads = staleFor(sources, filters);
  let share: MatchShare;
  // The lookup reads the matches; the walk reads about (limit + 1) * children / matches rows.
  const read = async (matches: number, children: number) => {
    const lookUp = matches < ((limit + 1) * children) / matches;
    share = children > 0 ? matches / children : 0;
    if (!lookUp) return walk(((limit + 1) * children) / Math.max(matches, 1));
    // OFFSET 0 keeps the planner from walking the registration index to honour the ORDER BY.
    const lookupParams = [...params];
    const text = `SELECT ${columns} FROM (SELECT * FROM "Account" WHERE ${filters.lookupWhere(lookupParams)}${keyset} OFFSET 0) AS "Account" ${sorted}`;
    return formatted(await reads.query<ChildRow>(text, lookupParams));
  };
  // The walk reads in stretches, each four times the last, so that PostgreSQL plans it as a walk of
  // the registration index rather than a sort of every child. A stretch's last row tells where it ended.
  const walk = async (expected: number): Promise<ListedRow[]> => {
    const found: ChildRow[] = [];
    let from: Position | undefined;
    for (let stretch = Math.max(SEARCH_WALK_ROWS, Math.ceil(2 * expected)); ; stretch *= 4) {
      const walkParams = [...params];
      const onwards = from ? keysetCondition(walkParams, from, order === 'DESC' ? '<' : '>') : '';
      const bound = `$${walkParams.push(stretch)}`;
      const rows = await reads.query<ChildRow & { matched: boolean; walked: string }>(
        `SELECT ${columns}, matched, walked FROM (
           SELECT *, ${filters.match} AS matched, row_number() OVER (${registrationOrder(order)}) AS walked FROM (
             SELECT * FROM "Account" WHERE ${filters.unsearched}${keyset}${onwards} ${registrationOrder(order, bound)}) AS walk) AS "Account"
         WHERE matched OR walked = ${bound} ${sorted}`,
        walkParams,
      );
      let last: ChildRow | undefined;
      for (const { matched, walked, ...row } of rows) {
        if (matched) found.push(row);
        if (Number(walked) === stretch) last = row;
      }
      if (found.length > limit || last === undefined) return formatted(found.slice(0, limit + 1));
      from = { createdAt: new Date(last.createdAtMs), id: last.id };
    }
  };
  const children = async () => (await sources.childCount(parentId)) ?? 0;
  // A cached count tells the choice without a walk (within dates, only a count of none does).
  const counted = sources.cache.hit<ChildCounts>(
    { namespace: '', tags: () => [cacheTags.children(parentId)] },
    filters.cacheKey,
  );
  if (counted !== MISS && counted !== null && counted.total !== null && (counted.total === 0 || !filters.dated)) {
    return { rows: counted.total === 0 ? [] : await read(counted.total, await children()), share };
  }
  // The walk also counts the matches among the children it read: the share the counts go by.
  const walked = await reads.query<ChildRow & { walkMatches: number; walked: number }>(
    `SELECT ${columns}, "walkMatches", walked FROM (
       SELECT *, count(*) OVER ()::int AS "walkMatches" FROM (
         SELECT *, count(*) OVER ()::int AS walked FROM (
           SELECT * FROM "Account" WHERE ${filters.unsearched}${keyset} ${registrationOrder(order, SEARCH_WALK_ROWS)}) AS walk) AS "Account"
       WHERE ${filters.match}) AS "Account" ${sorted}`,
    params,
  );
  if (walked.length > limit) {
    share = walked[0]!.walkMatches / walked[0]!.walked;
    return { rows: formatted(walked.map(({ walkMatches: _matches, walked: _walked, ...row }) => row)), share };
  }
  const total = await children();
  const rows = await read((Math.max(walked.length, 0.5) / SEARCH_WALK_ROWS) * total, total);
  return { rows, share };
}

/** stats.total and stats.active (decisions §4), cached until a child of the parent changes what they count. */
export async function readCounts(
  sources: ChildListSources,
  filters: ChildFilters,
  share: MatchShare,
  now: number,
): Promise<{ total: number; active: number }> {
  const { parentId } = filters;
  const counted = await sources.cache.through(filters.cacheKey, {
    tags: [cacheTags.children(parentId)],
    read: (query) => queryCounts(filters, share, now, query),
    via: filters.match !== undefined ? sources.search?.primary : undefined,
    share: true,
    usable: (hit) => now >= hit.computedAt && now < hit.validUntil,
    amend: filters.filtered ? undefined : countFirstLogin,
  });
  // Unfiltered, the total is the parent's child count, kept exact on its own (see `childCountByParentId`).
  return {
    total: counted.total ?? (await sources.childCount(parentId)),
    active: counted.active,
  };
}

/**
 * A child's first login in the window adds one to the parent's unfiltered active count while it holds;
 * any other change is counted again.
 */
function countFirstLogin(counts: ChildCounts | null, change: RowChange, now: number): ChildCounts | undefined {
  const { stable, lastLogin } = change;
  if (
    counts === null ||
    stable ||
    lastLogin === undefined ||
    activityShift(lastLogin.before, lastLogin.after, now) !== 'became active'
  )
    return undefined;
  return now < counts.computedAt || now >= counts.validUntil ? undefined : { ...counts, active: counts.active + 1 };
}

/** One query for the counts of `readCounts`, kept with the moment the active ones expire. */
async function queryCounts(
  filters: ChildFilters,
  share: MatchShare,
  now: number,
  query: SnapshotQuery,
): Promise<ChildCounts> {
  const params = [...filters.params];
  const cutoff = `$${params.push(new Date(now - ACTIVE_WINDOW_MS))}`;
  const total = filters.filtered ? 'count(*)::int' : 'NULL::int';
  const filtersWhere = countedWhere(filters, share, params);
  const where = filters.filtered ? filtersWhere : `${filtersWhere} AND "lastLogin" >= ${cutoff}`;
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

/** How many children registered in each UTC month since `from`, by the month's first day, cached as the counts. */
export function readRegistrations(cache: CacheReader, parentId: string, from: string): Promise<Record<string, number>> {
  return cache.through(`registrations:${parentId}|${from}`, {
    tags: [cacheTags.children(parentId)],
    read: async (query) => {
      const rows = await query<{ month: string; n: number }>(
        `to_char(date_trunc('month', "createdAt", 'UTC'), 'YYYY-MM-DD') AS month, count(*)::int AS n`,
        `FROM "Account" WHERE "parentId" = $1 AND "createdAt" >= $2::timestamptz GROUP BY 1`,
        [parentId, from],
      );
      return Object.fromEntries(rows.map((row) => [row.month, row.n]));
    },
    share: true,
  });
}
