import { requireParent } from '../auth/authorize.js';
import type { RequestContext } from '../context.js';
import {
  ApiError,
  InvalidDateFormatError,
  InvalidFormatError,
  InvalidLimitError,
  InvalidPaginationTokenError,
  InvalidSearchError,
} from '../errors.js';
import { ListChildAccountsInput, listChildAccounts } from '../services/list-child-accounts.js';

/** decisions §4: a known parameter given twice is invalid for that parameter; unknown ones are ignored. */
const REPEATED: Record<string, () => ApiError> = {
  search: () => new InvalidSearchError('search may be given only once.'),
  startDate: () => new InvalidDateFormatError('startDate may be given only once.'),
  endDate: () => new InvalidDateFormatError('endDate may be given only once.'),
  limit: () => new InvalidLimitError('limit may be given only once.'),
  lastKey: () => new InvalidPaginationTokenError('lastKey may be given only once.'),
  format: () => new InvalidFormatError('format may be given only once.'),
};

/** A known parameter's one value (the list's and the export's). */
export function single(parameters: Map<string, string[]>, name: keyof typeof REPEATED): string | undefined {
  const values = parameters.get(name);
  if (!values) return undefined;
  if (values.length > 1) throw REPEATED[name]!();
  return values[0];
}

/** The query string as the service's input: limit must be digits only (decisions §4). */
export function childAccountsInput(parameters: Map<string, string[]>): ListChildAccountsInput {
  const limit = single(parameters, 'limit');
  if (limit !== undefined && !/^\d{1,3}$/.test(limit)) throw new InvalidLimitError();
  return ListChildAccountsInput.parse({
    search: single(parameters, 'search'),
    startDate: single(parameters, 'startDate'),
    endDate: single(parameters, 'endDate'),
    limit: limit === undefined ? undefined : Number(limit),
    after: single(parameters, 'lastKey'),
  });
}

/** GET /auth/child-accounts: the doubled `data.data` of the original. */
export async function childAccounts(context: RequestContext, parameters: Map<string, string[]>): Promise<unknown> {
  const viewer = requireParent(await context.jwtViewer());
  const page = await listChildAccounts(viewer, childAccountsInput(parameters), context.services);
  const stats = await page.stats();
  return {
    success: true,
    data: {
      data: {
        stats,
        accounts: page.accounts.map((a) => ({
          username: a.username,
          email: a.email,
          lastSeen: a.lastSeenIso,
          registered: a.registeredIso,
        })),
        pagination: {
          limit: page.limit,
          hasMore: page.hasMore,
          ...(page.nextPageToken ? { nextPageToken: page.nextPageToken } : {}),
        },
      },
    },
  };
}
