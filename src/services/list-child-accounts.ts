import { z } from 'zod';
import type { ParentViewer } from '../auth/authorize.js';
import { parseDateRange } from '../domain/dates.js';
import { decodePageToken, encodePageToken, type PageScope, type Position } from '../domain/pagination.js';
import { InvalidLimitError, InvalidSearchError } from '../errors.js';
import {
  existsBeyond,
  filterSql,
  readCounts,
  readPage,
  type ChildFilters,
  type ChildListSources,
  type ListedRow,
  type MatchShare,
} from '../db/child-list.js';
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

type Stats = { total: number; active: number };

export type ChildAccountPage = {
  /** Newest first, whichever way the page was read. */
  accounts: ChildAccountListItem[];
  limit: number;
  /** Read forwards (`first`/`limit`): whether older children follow. */
  hasMore: boolean;
  /** Present when hasMore. */
  nextPageToken: string | undefined;
  /** Relay's page info: the side read towards is known; the other is one indexed probe, only when asked. */
  hasNextPage: () => Promise<boolean>;
  hasPreviousPage: () => Promise<boolean>;
  /** Counts of all children matching the filters (not just the page); computed on demand. */
  stats: () => Promise<{ total: number; active: number }>;
};

/** Signed cursors by row, so that the cached first page's cursors are signed once, not per request. */
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
    const cursor = encodePageToken(
      { createdAt: new Date(this.#row.createdAtMs), id: this.accountId },
      this.#scope,
      this.#key,
    );
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
    throw new InvalidLimitError(
      `${input.first !== undefined ? 'first' : input.last !== undefined ? 'last' : 'limit'} must be a whole number from 1 to 100.`,
    );
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

  const sources: ChildListSources = {
    cache: context.cache,
    staleReads: context.staleReads,
    childCount: (id) => context.loaders.childCountByParentId.load(id),
    search: search === undefined ? undefined : context.searchesOf(parentId),
  };
  const { rows, share } = await readPage(sources, filters, { after, before, backwards, limit });
  const more = rows.length > limit;
  const read = rows.slice(0, limit);
  if (backwards) read.reverse();
  const accounts = read.map((row) => new ListedChild(row, filters.scope, key));
  const hasMore = !backwards && more;
  const beyond = async (position: Position | undefined, op: '>=' | '<=') =>
    position ? existsBeyond(sources, filters, share, position, op) : false;
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
    stats: () => (stats ??= countChildren(sources, filters, share, context)),
  };
}

/** The counts, as of the request's clock. */
async function countChildren(
  sources: ChildListSources,
  filters: ChildFilters,
  share: MatchShare,
  context: ServiceContext,
): Promise<Stats> {
  const { total, active } = await readCounts(sources, filters, share, context.now().getTime());
  return { total, active };
}
