import { isoTime } from '../domain/dates.js';
import type { PageScope, Position } from '../domain/pagination.js';
import { ACTIVE_WINDOW_MS, activityShift } from '../domain/activity.js';
import type { RowChange } from './capture/changes.js';
import { cacheTags } from './cache-tags.js';
import { MISS, type CacheReader } from './entity-cache.js';
import type { ReadQuery } from './replicas.js';
import type { SearchReads } from './search-reads.js';
import type { SnapshotQuery } from './snapshots.js';

/*
 * A parent's children as the database reads them: the list's filters as SQL, the keyset pages,
 * the search's choice of plan, the counts, the registrations by month; and what of it is cached,
 * under which key, tags and amendment (which change drops which tag: `droppedBy` in
 * `cache-tags.ts`). The services check the input and compose the answers.
 */

/**
 * A parent's child counts as cached: `total` null when taken from the organization's child
 * count; valid from `computedAt` until `validUntil`, when the oldest login it counted as active
 * leaves the window.
 */
export type ChildCounts = { total: number | null; active: number; computedAt: number; validUntil: number };

/** A page row as read: times as epoch milliseconds, a number being far cheaper for the driver. */
export type ChildRow = { id: string; username: string; email: string; lastLoginMs: number | null; createdAtMs: number };

/**
 * A page row with its times formatted: what the cached first page holds, so that the many
 * requests answered from one read format them once (and the cache's size estimate counts them).
 */
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
 * The filters (decisions §4) as SQL on Account: its WHERE clause with parameters from `$1`, the
 * scope that page tokens are bound to, and the key their counts are cached under. A search is
 * `ILIKE` on the names, which the trigram indexes serve from three characters (pg_trgm folds
 * case); a shorter term is looked up in the grams index (migration short_search_terms) by
 * `lookupWhere`, which adds its gram to the filters.
 */
export function filterSql(parentId: string, search: string | undefined, range: { from?: Date; to?: Date }) {
  const params: unknown[] = [parentId];
  const clauses = ['"parentId" = $1'];
  if (range.from) clauses.push(`"createdAt" >= $${params.push(range.from)}`);
  if (range.to) clauses.push(`"createdAt" <= $${params.push(range.to)}`);
  const unsearched = clauses.join(' AND ');
  let match: string | undefined;
  let scanWhere: string | undefined;
  /** The ILIKE pattern's parameter number. */
  let n = 0;
  if (search) {
    n = params.push(`%${escapeLike(search)}%`);
    match = `(username ILIKE $${n} OR email ILIKE $${n})`;
    // The same rows (ILIKE is LIKE on both sides lower-cased), for a scan of most of the parent's
    // children: ILIKE lower-cases its pattern again for every row, this form once a statement, and
    // no trigram index serves it, so a search most children match is never looked up there. A name
    // that holds the lower-cased term as stored holds it lower-cased too, so the names are first
    // matched as stored and lower-cased only when that fails. A term of ASCII characters that are
    // not letters has no case: the names match it as stored or not at all (figures: `test/bench/README.md`, "Figures behind the design").
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
  // Every gram of the lower-cased term is one of the names' (the term itself when it stays one or
  // two characters): the index finds the candidates, ILIKE decides. The term is a parameter of
  // the statements that use it only (PostgreSQL refuses a parameter a statement does not name).
  const grams = (statementParams: unknown[]): string => {
    const t = `$${statementParams.push(search)}::text`;
    return `"child_search_grams"(lower(username) || chr(1) || lower(email)) @> (CASE WHEN length(lower(${t})) <= 2 THEN ARRAY[lower(${t})] ELSE "child_search_grams"(lower(${t})) END)`;
  };
  const lookupWhere = (statementParams: unknown[]): string =>
    short ? `${where} AND ${grams(statementParams)}` : where;
  // A term of one or two characters is itself a gram, and a child has it exactly when ILIKE
  // matches (a name holds the lower-cased term): the index alone tells, and no row found is
  // lower-cased again. Unless the term holds the character that joins the names, which would
  // match across them.
  // The ILIKE pattern stays among the statement's parameters, named by a condition the planner
  // folds away (PostgreSQL refuses a parameter a statement does not name).
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
     * `where` as a lookup of the search's matches in an index, its parameters added to
     * `statementParams`: the trigram indexes from three characters, the grams index below. Only
     * for a search seen to be rare: on a parent whose children mostly match, PostgreSQL would
     * evaluate the grams of every row (a minute at a million children), where reading the rows
     * in order finds the page at once.
     */
    lookupWhere,
    /**
     * `lookupWhere` without the ILIKE the index already decides: only for a term of one or two characters
     * (see `countedWhere`).
     */
    gramWhere,
    /** `where` for a search seen to match most children (see `countedWhere`). */
    scanWhere: scanWhere ?? where,
    params,
    filtered,
    /** Whether registration dates bound the list. */
    dated: range.from !== undefined || range.to !== undefined,
    scope,
    cacheKey: `stats:${scope}`,
  };
}

/** The child list's filters as SQL (see `filterSql`). */
export type ChildFilters = ReturnType<typeof filterSql>;

/**
 * A keyset condition on the (parentId, createdAt DESC, id DESC) index: rows whose (registration,
 * id) compare to `position` as `op` says, its values added to `params`.
 */
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

/**
 * Registration order (newest first with DESC), ties by id: the order of every child list; with a row count,
 * `limit`.
 */
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
 * One page's rows (and one more, telling that more follow), in the order read: newest first, or
 * oldest first when `backwards`. The unfiltered first page is what dashboards poll: cached until a
 * child of the parent is added, removed or changed in anything but its activity, or a child it
 * shows signs in (its rows' own tags); one entry per parent and limit, so no caller can fill the
 * cache with pages of its choosing; read on the primary. Other pages are read where bounded
 * staleness is allowed (a replica when one is usable: at most REPLICA_MAX_LAG_MS behind).
 */
export async function readPage(
  sources: ChildListSources,
  filters: ChildFilters,
  position: PagePosition,
): Promise<Page> {
  const { after, before, backwards, limit } = position;
  const { parentId } = filters;
  const params = [...filters.params];
  // Row comparisons: range conditions on the (parentId, createdAt DESC, id DESC) index, read
  // forwards (older) from `after` or backwards (newer) from `before`.
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

/**
 * Up to `limit` children older than `after` (from the newest without it), newest first, read
 * where bounded staleness is allowed: a batch of an export, which walks the whole list and is
 * never cached.
 */
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

/**
 * Whether any matching child lies beyond `position` (`op`: inclusive, towards newer `>=` or older
 * `<=`): the cursor's own row, if it still exists, is not on the page.
 */
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

/**
 * The share of the parent's children (within the dates) that a search matches, as its page's read
 * estimated it (undefined: not estimated). Below `LOOKUP_SHARE`, the counts and the Relay probes
 * of the same request look the matches up too (see `countedWhere`).
 */
export type MatchShare = number | undefined;

/** A page's rows (one past the limit when more follow), and what its read saw of the search. */
export type Page = { rows: ListedRow[]; share?: MatchShare };

/** Children a search page reads in registration order before it looks its matches up instead. */
export const SEARCH_WALK_ROWS = 500;

/**
 * Below this share of matching children, counting a search reads its matches from an index rather
 * than every child: the lookup wins for rare terms and loses for common ones (figures: `test/bench/README.md`, "Figures behind the design").
 */
const LOOKUP_SHARE = 0.25;

/**
 * Below this share of matching children, a term of one or two characters is counted from the
 * grams index alone (`gramWhere`); above it the scan, which finds the term as stored in nearly
 * every name, is faster. Within dates the index still finds the parent's every match, where the
 * scan reads only the children registered then: there the share is LOOKUP_SHARE (figures: `test/bench/README.md`, "Figures behind the design").
 */
const GRAM_COUNT_SHARE = 0.6;

/**
 * The filters for a count or a probe: the lookup of the matches when they are few enough (see
 * `share`), a scan when they are most; the planner chooses when the page did not estimate.
 */
const countedWhere = (filters: ChildFilters, share: MatchShare, params: unknown[]): string => {
  const { gramWhere } = filters;
  if (share === undefined) return filters.where;
  if (share >= (gramWhere && !filters.dated ? GRAM_COUNT_SHARE : LOOKUP_SHARE)) return filters.scanWhere;
  return gramWhere ? gramWhere(params) : filters.lookupWhere(params);
};

/**
 * One page of a search. Walking the parent's children in registration order stops as soon as the
 * page is full: cheap when the search matches many, a walk through every child when it matches
 * few. Looking the matches up in an index (the trigram indexes, or the grams index for a term of
 * one or two characters; both hold the parent) reads only the matches, then sorts them: cheap
 * when they are few. PostgreSQL's estimate of how many a
 * substring matches is too rough to choose between the two, so the page chooses by what it sees: it walks at most SEARCH_WALK_ROWS children first, which fills the page when matches
 * are common; otherwise the matches found there estimate how many the parent has, and the
 * cheaper of a whole walk and the lookup reads the page. When the
 * search's counts are cached, they tell how many match without the walk.
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
    // The keyset's parameters are in `params` already; the lookup's follow them.
    const lookupParams = [...params];
    const text = `SELECT ${columns} FROM (SELECT * FROM "Account" WHERE ${filters.lookupWhere(lookupParams)}${keyset} OFFSET 0) AS "Account" ${sorted}`;
    return formatted(await reads.query<ChildRow>(text, lookupParams));
  };
  // The walk reads the children in registration order until the page is full, a stretch at a
  // time, each stretch four times the last, from twice the rows it expects to need: a statement
  // bounded to a stretch (and numbering its rows in that order) is planned as the walk it is, on
  // the registration index, stopping when the page is full. Without the bound, PostgreSQL, which
  // estimates a substring's matches far too low, planned reading every child in the dates and
  // sorting them. The last row of a stretch is read even when it does not match: it tells that
  // the walk goes on, and from where.
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
  // How many children match, when the search's counts are cached (a search asked again, its
  // counts asked with its first page): the choice needs no walk. Within dates, the count is of
  // the children in them, whose number is not known: only none tells the choice anything.
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

/**
 * stats.total and stats.active (decisions §4) for the filters, at `now`. Counting can touch every
 * child of a large parent, so the counts are cached until a child of this parent changes what
 * they count (`children:` in `droppedBy`) or the oldest login counted as active leaves the
 * window; the unfiltered ones follow first logins.
 */
export async function readCounts(
  sources: ChildListSources,
  filters: ChildFilters,
  share: MatchShare,
  now: number,
): Promise<{ total: number; active: number }> {
  const { parentId } = filters;
  // With the snapshot: a count that already saw a sign-in announced meanwhile is still stored.
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
 * A child logging in for the first time in the window (what most sign-ins are) adds one to its
 * parent's unfiltered active count, while the count holds: every child it counted logged in after
 * `validUntil` minus the window, so this one, inactive until now, was not among them. A filtered
 * count may or may not include the child, and any other change may alter what is counted: those
 * are counted again.
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
  // Unfiltered, the total is the parent's kept child count: only the active ones are counted.
  const total = filters.filtered ? 'count(*)::int' : 'NULL::int';
  // A search its page found rare enough is counted from the index too (see `lookupWhere`).
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

/**
 * How many children registered in each calendar month (UTC) since `from` (a month's first day),
 * by the month's first day, `YYYY-MM-DD`: one count over the window, kept until a child of the
 * parent changes what the counts see (the `children:` tag).
 */
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
