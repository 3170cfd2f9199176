import { z } from 'zod';
import type { Viewer } from '../auth/authenticate.js';
import { parseDateRange } from '../domain/dates.js';
import { decodePageToken, encodePageToken, type Position } from '../domain/pagination.js';
import { InvalidLimitError, InvalidSearchError } from '../errors.js';
import type { Prisma } from '../generated/prisma/client.js';
import type { ServiceContext } from './context.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 100;
export const MAX_SEARCH_LENGTH = 200;
const ACTIVE_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;

/** The child list's input, shared by both transports (decisions §4). */
export const ListChildAccountsInput = z.object({
  search: z.string().optional(),
  startDate: z.string().optional(),
  endDate: z.string().optional(),
  limit: z.number().optional(),
  after: z.string().optional(),
});
export type ListChildAccountsInput = z.infer<typeof ListChildAccountsInput>;

export type ChildAccountListItem = {
  username: string;
  email: string;
  /** Last login; null when the child never logged in. */
  lastSeen: Date | null;
  registered: Date;
  /** The page token that continues after this row. */
  cursor: string;
};

export type ChildAccountPage = {
  accounts: ChildAccountListItem[];
  limit: number;
  hasMore: boolean;
  /** Present when hasMore. */
  nextPageToken: string | undefined;
  /** Counts of all children matching the filters (not just the page); computed on demand. */
  stats: () => Promise<{ total: number; active: number }>;
};

function validLimit(limit: number | undefined): number {
  if (limit === undefined) return DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) throw new InvalidLimitError();
  return limit;
}

function validSearch(search: string | undefined): string | undefined {
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

/** A parent's children, newest registration first, keyset-paginated (spec: GET /auth/child-accounts). */
export async function listChildAccounts(
  viewer: Viewer,
  input: ListChildAccountsInput,
  context: ServiceContext,
): Promise<ChildAccountPage> {
  const parentId = viewer.account.id;
  const limit = validLimit(input.limit);
  const search = validSearch(input.search);
  const range = parseDateRange(input.startDate, input.endDate);
  const key = context.paginationSecret ?? viewer.organization.jwtSecret;
  const after: Position | undefined =
    input.after === undefined ? undefined : decodePageToken(input.after, parentId, key);

  const filters: Prisma.AccountWhereInput[] = [{ parentId }];
  if (range.from || range.to) filters.push({ createdAt: { gte: range.from, lte: range.to } });
  if (search) {
    const pattern = escapeLike(search);
    filters.push({
      OR: [
        { username: { contains: pattern, mode: 'insensitive' } },
        { email: { contains: pattern, mode: 'insensitive' } },
      ],
    });
  }
  const keyset: Prisma.AccountWhereInput[] = after
    ? [{ OR: [{ createdAt: { lt: after.createdAt } }, { createdAt: after.createdAt, id: { lt: after.id } }] }]
    : [];
  const rows = await context.prisma.account.findMany({
    where: { AND: [...filters, ...keyset] },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: limit + 1,
    select: { id: true, username: true, email: true, lastLogin: true, createdAt: true },
  });
  const hasMore = rows.length > limit;
  const page = rows.slice(0, limit);
  const accounts = page.map((row) => ({
    username: row.username,
    email: row.email,
    lastSeen: row.lastLogin,
    registered: row.createdAt,
    cursor: encodePageToken({ createdAt: row.createdAt, id: row.id }, parentId, key),
  }));
  const now = context.now();
  let stats: Promise<{ total: number; active: number }> | undefined;
  return {
    accounts,
    limit,
    hasMore,
    nextPageToken: hasMore ? accounts[accounts.length - 1]?.cursor : undefined,
    stats: () =>
      (stats ??= Promise.all([
        // Unfiltered, the total is the organization's kept child count: no count over the rows.
        filters.length === 1 ? viewer.organization.childCount : context.prisma.account.count({ where: { AND: filters } }),
        context.prisma.account.count({
          where: { AND: [...filters, { lastLogin: { gte: new Date(now.getTime() - ACTIVE_WINDOW_MS) } }] },
        }),
      ]).then(([total, active]) => ({ total, active }))),
  };
}
