import {
  DEFAULT_LIMIT,
  ListChildAccountsInput,
  MAX_LIMIT,
  MAX_SEARCH_LENGTH,
  listChildAccounts,
  type ChildAccountListItem,
  type ChildAccountPage,
} from '../services/list-child-accounts.js';
import { requireParent } from '../auth/authorize.js';
import { builder, viewerOf } from './builder.js';
import { globalId } from './node-interface.js';
import { DateTime } from './scalars.js';

const ChildAccountSummary = builder.objectRef<ChildAccountListItem>('ChildAccountSummary').implement({
  description: 'A child account as listed for its parent.',
  fields: (t) => ({
    id: t.id({
      description:
        "The child's global id, the one its own `me { id }` answers: normalised caches (Apollo Client, urql's graphcache) key a listed child by it.",
      resolve: (c) => globalId('Account', c.accountId),
    }),
    username: t.exposeString('username', { description: 'The username.' }),
    email: t.exposeString('email', { description: 'The email address.' }),
    lastSeen: t.field({
      type: DateTime,
      nullable: true,
      description: 'Last login; null when the child never logged in.',
      resolve: (c) => c.lastSeenIso,
    }),
    registered: t.field({ type: DateTime, description: 'Registration time.', resolve: (c) => c.registeredIso }),
  }),
});

const ChildAccountEdge = builder.objectRef<ChildAccountListItem>('ChildAccountEdge').implement({
  description: 'A child account in a page, with the cursor that continues after it.',
  fields: (t) => ({
    cursor: t.exposeString('cursor', {
      description: 'Pass as `after` to continue after this child, or as `before` to page back from it.',
    }),
    node: t.field({ type: ChildAccountSummary, description: 'The child account.', resolve: (c) => c }),
  }),
});

const PageInfo = builder.objectRef<ChildAccountPage>('PageInfo').implement({
  description: "Where a page starts and ends, as Relay's connection specification has it.",
  fields: (t) => ({
    hasNextPage: t.boolean({ description: 'Whether older children follow the page.', resolve: (p) => p.hasNextPage() }),
    hasPreviousPage: t.boolean({
      description: 'Whether newer children precede the page.',
      resolve: (p) => p.hasPreviousPage(),
    }),
    startCursor: t.string({
      nullable: true,
      description: 'The cursor of the first child of the page; null on an empty page.',
      resolve: (p) => p.accounts[0]?.cursor ?? null,
    }),
    endCursor: t.string({
      nullable: true,
      description: 'The cursor of the last child of the page; null on an empty page.',
      resolve: (p) => p.accounts.at(-1)?.cursor ?? null,
    }),
  }),
});

const ChildAccountStats = builder.objectRef<{ total: number; active: number }>('ChildAccountStats').implement({
  description: 'Counts of all children matching the filters, not just this page.',
  fields: (t) => ({
    total: t.exposeInt('total', { description: 'Matching children, any status.' }),
    active: t.exposeInt('active', { description: 'Matching children with a login in the last 30 days.' }),
  }),
});

const ChildAccountConnection = builder.objectRef<ChildAccountPage>('ChildAccountConnection').implement({
  description: "A page of the parent's child accounts, newest registration first.",
  fields: (t) => ({
    edges: t.field({ type: [ChildAccountEdge], description: 'The children of this page.', resolve: (p) => p.accounts }),
    pageInfo: t.field({ type: PageInfo, description: 'Where this page ends.', resolve: (p) => p }),
    stats: t.field({
      type: ChildAccountStats,
      description: 'Counts over all matching children (computed only when asked for).',
      resolve: (p) => p.stats(),
    }),
  }),
});

builder.queryField('childAccounts', (t) =>
  t.field({
    type: ChildAccountConnection,
    description:
      "The parent's child accounts, newest registration first, keyset-paginated (a Relay connection: `first`/`after` forwards, `last`/`before` backwards). Parent accounts only.",
    authScopes: { parent: true },
    args: {
      search: t.arg.string({
        description: `Case-insensitive substring of the username or email (at most ${MAX_SEARCH_LENGTH} characters; empty means no filter).`,
      }),
      startDate: t.arg.string({
        description:
          'Earliest registration, inclusive: YYYY-MM-DD (the whole UTC day), an ISO 8601 date-time (UTC without an offset), or epoch milliseconds.',
      }),
      endDate: t.arg.string({
        description: 'Latest registration, inclusive, in the same formats; YYYY-MM-DD includes that whole day.',
      }),
      limit: t.arg.int({
        description: `Children per page, 1 to ${MAX_LIMIT} (default ${DEFAULT_LIMIT}); the same as \`first\`. Give one of limit, first and last.`,
      }),
      first: t.arg.int({ description: `Children per page read forwards (older), 1 to ${MAX_LIMIT}.` }),
      after: t.arg.string({
        description: 'The endCursor (or any edge cursor) of the previous page: the page starts after it.',
      }),
      last: t.arg.int({
        description: `Children per page read backwards (newer), 1 to ${MAX_LIMIT}: the last children before \`before\` (or of the whole list).`,
      }),
      before: t.arg.string({
        description: 'The startCursor (or any edge cursor) of the page seen: the page ends before it.',
      }),
    },
    resolve: async (_root, args, context) =>
      listChildAccounts(
        requireParent(await viewerOf(context, 'jwt')),
        ListChildAccountsInput.parse({
          search: args.search ?? undefined,
          startDate: args.startDate ?? undefined,
          endDate: args.endDate ?? undefined,
          limit: args.limit ?? undefined,
          after: args.after ?? undefined,
          first: args.first ?? undefined,
          last: args.last ?? undefined,
          before: args.before ?? undefined,
        }),
        context.services,
      ),
  }),
);
