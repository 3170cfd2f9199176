import DataLoader from 'dataloader';
import { MIN_SECRET_BYTES, secretKey, verificationKey, type SigningKey } from './auth/tokens.js';
import { cacheTags, SNAPSHOT_COLUMN, takeSnapshot, type CacheTicket, type EntityCache, type Snapshot } from './db/entity-cache.js';
import { packAccount, READ_ACCOUNT_COLUMNS, unpackAccount, type AccountRow } from './db/accounts.js';
import type { SqlDriver } from './db/database.js';
import type { Organization, PrismaClient } from './generated/prisma/client.js';
import type { MonthlyUsageTotals, PackagePurchase } from './domain/credit-analysis.js';

/**
 * Per-request loaders: each batches the lookups of one request into one query and remembers them
 * for the request. Underneath, the process's entity cache answers what it holds (see
 * `db/entity-cache.ts`), so the hot paths usually make no query at all.
 */
export type Loaders = ReturnType<typeof createLoaders>;

/** Columns that change with every sign-in (balances) or retrieval: not part of the settings. */
const VOLATILE_ORGANIZATION_COLUMNS = {
  accountBalance: true,
  availableBalance: true,
  updatedAt: true,
  detailsRetrievalCount: true,
  lastDetailsRetrievalAt: true,
} as const;

/** What every sign-in changes in an organization: its balances (the legacy dollar ones as numbers). */
export type OrganizationBalances = { creditBalance: number; accountBalance: number; availableBalance: number };

/** An organization as authentication and most answers see it: no balances, and whether it has credits left. */
export type OrganizationSettings = Omit<Organization, 'creditBalance' | keyof typeof VOLATILE_ORGANIZATION_COLUMNS> & { funded: boolean };

/** What a loader read: rows by key, and the snapshot they were read with when the query took one. */
type Loaded<V> = { rows: Map<string, V>; seen?: Snapshot };

type ThroughCacheOptions<V, Stored> = {
  /** How a value is held in the cache, when a more compact form than the value itself pays. */
  form?: { pack: (value: V) => Stored; unpack: (stored: Stored) => V };
  /**
   * Callers of other requests missing the same key while a read of it runs share that read (the
   * rows every sign-in changes, which many callers miss at once). Only for loaders whose tags do
   * not depend on the value.
   */
  share?: boolean;
};

/**
 * Answers `keys` from the cache, loads the misses in one query, and stores what was loaded with
 * the tags of the rows it came from (a `null` is stored too: "no such row" until one is announced).
 */
async function throughCache<V, Stored = V>(
  cache: EntityCache,
  namespace: string,
  keys: readonly string[],
  load: (misses: string[]) => Promise<Loaded<V>>,
  tags: (key: string, value: V | null) => readonly string[],
  options: ThroughCacheOptions<V, Stored> = {},
): Promise<(V | null)[]> {
  const { form, share } = options;
  const results: (V | null | undefined)[] = keys.map((key) => {
    const stored = cache.get<Stored | null>(`${namespace}:${key}`)?.value;
    return stored === undefined || stored === null || !form ? (stored as V | null | undefined) : form.unpack(stored);
  });
  const misses = keys.filter((_, i) => results[i] === undefined);
  if (misses.length === 0) return results as (V | null)[];
  const ticket = cache.ticket();
  const joined = new Map<string, Promise<{ value: V | null } | undefined>>();
  if (share) {
    for (const key of misses) {
      const running = cache.join<V | null>(`${namespace}:${key}`, tags(key, null));
      if (running) joined.set(key, running);
    }
  }
  const own = joined.size === 0 ? misses : misses.filter((key) => !joined.has(key));
  const read = own.length > 0 ? load(own) : undefined;
  if (read && share) {
    for (const key of own) cache.track(`${namespace}:${key}`, ticket, read.then(({ rows, seen }) => ({ value: rows.get(key) ?? null, seen })));
  }
  const store = (key: string, value: V | null, readTicket: CacheTicket, seen: Snapshot | undefined) =>
    cache.set(readTicket, `${namespace}:${key}`, value !== null && form ? form.pack(value) : value, tags(key, value), seen);
  const values = new Map<string, V | null>();
  if (read) {
    const { rows, seen } = await read;
    for (const key of own) {
      const value = rows.get(key) ?? null;
      store(key, value, ticket, seen);
      values.set(key, value);
    }
  }
  for (const [key, running] of joined) {
    const shared = await running;
    if (shared) {
      values.set(key, shared.value);
      continue;
    }
    // The shared read may have missed a change announced before this caller came: read again.
    const retryTicket = cache.ticket();
    const { rows, seen } = await load([key]);
    const value = rows.get(key) ?? null;
    store(key, value, retryTicket, seen);
    values.set(key, value);
  }
  return keys.map((key, i) => (results[i] !== undefined ? results[i] : values.get(key)!));
}

/** Accounts without their secrets (decisions §7), which are never loaded. */
const SELECT_ACCOUNTS = `SELECT ${READ_ACCOUNT_COLUMNS.map((column) => `"${column}"`).join(', ')} FROM "Account"`;

export function createLoaders(prisma: PrismaClient, sql: SqlDriver, cache: EntityCache) {
  const accountForm = { pack: packAccount, unpack: unpackAccount };
  // Accounts are what a new user's first request misses: one plain SQL statement on the pool
  // (the driver types the columns as Prisma does), without the ORM's per-query cost.
  // With the read's snapshot: a parent's row changes with every sign-in in its organization.
  const accountsWhere = async (column: 'id' | 'publicKey', values: string[]): Promise<Loaded<AccountRow>> => {
    const { rows, seen } = takeSnapshot(await sql.query<AccountRow>(`${SELECT_ACCOUNTS} WHERE "${column}" = ANY($1::text[])`, [values]));
    return { rows: new Map(rows.map((a) => [a[column], a])), seen };
  };

  const accountById = new DataLoader<string, AccountRow | null>((ids) =>
    throughCache(
      cache,
      'account',
      ids,
      (misses) => accountsWhere('id', misses),
      // Any change to the row announces its id, whatever changed.
      (id) => [cacheTags.account(id)],
      { form: accountForm, share: true },
    ),
  );
  const accountByPublicKey = new DataLoader<string, AccountRow | null>(async (keys) => {
    const accounts = await throughCache(
      cache,
      'accountByKey',
      keys,
      (misses) => accountsWhere('publicKey', misses),
      // The key's row changing, or a row taking the key.
      (key, account) => (account ? [cacheTags.account(account.id), cacheTags.publicKey(key)] : [cacheTags.publicKey(key)]),
      { form: accountForm },
    );
    for (const account of accounts) if (account) accountById.prime(account.id, account);
    return accounts;
  });
  /** An account's public key: identity, kept while the account's counters change (a parent's do on every sign-in). */
  const publicKeyByAccountId = new DataLoader<string, string | null>((ids) =>
    throughCache(
      cache,
      'publicKeyOf',
      ids,
      async (misses) => ({
        rows: new Map(
          (await prisma.account.findMany({ where: { id: { in: misses } }, select: { id: true, publicKey: true } })).map((a) => [a.id, a.publicKey]),
        ),
      }),
      (id) => [cacheTags.identity(id)],
    ),
  );
  /**
   * The organization without its balances (settings, URLs, secret, child count) and whether it
   * still has credits: what authentication and most answers need, kept while sign-ins spend credits.
   */
  const organizationSettingsByParentId = new DataLoader<string, OrganizationSettings | null>((ids) =>
    throughCache(
      cache,
      'organizationSettings',
      ids,
      async (misses) => {
        const rows = await prisma.organization.findMany({ where: { parentId: { in: misses } }, omit: VOLATILE_ORGANIZATION_COLUMNS });
        return { rows: new Map(rows.map(({ creditBalance, ...settings }) => [settings.parentId, { ...settings, funded: creditBalance > 0 }])) };
      },
      (id) => [cacheTags.organizationSettings(id)],
    ),
  );
  /**
   * The organization's balances, which every sign-in changes (credits spent): read by primary key
   * with the read's snapshot, shared by the callers that miss them at once.
   */
  const balancesByParentId = new DataLoader<string, OrganizationBalances | null>((ids) =>
    throughCache(
      cache,
      'balances',
      ids,
      async (misses) => {
        const { rows, seen } = takeSnapshot(
          await sql.query<OrganizationBalances & { parentId: string }>(
            `SELECT "parentId", "creditBalance", "accountBalance"::float8 AS "accountBalance",
                    "availableBalance"::float8 AS "availableBalance", ${SNAPSHOT_COLUMN}
             FROM "Organization" WHERE "parentId" = ANY($1::text[])`,
            [misses],
          ),
        );
        return {
          rows: new Map(rows.map((row) => [row.parentId, { creditBalance: row.creditBalance, accountBalance: row.accountBalance, availableBalance: row.availableBalance }])),
          seen,
        };
      },
      (id) => [cacheTags.organization(id)],
      { share: true },
    ),
  );
  /**
   * The HS256 key of the organization whose parent holds this public key (a token's `kid`);
   * null for an unknown key, a child's key, or a secret too short to be safe (decisions §2).
   */
  const signingKeyByPublicKey = new DataLoader<string, SigningKey | null>((keys) =>
    throughCache<SigningKey | null>(
      cache,
      'signingKey',
      keys,
      async (misses) => {
        const rows = await prisma.account.findMany({
          where: { publicKey: { in: misses } },
          select: { id: true, publicKey: true, type: true, organization: { select: { jwtSecret: true } } },
        });
        const entries = await Promise.all(
          rows.map(async (row): Promise<[string, SigningKey | null]> => {
            const secret = row.type === 'parent' && row.organization ? secretKey(row.organization.jwtSecret) : undefined;
            const usable = secret !== undefined && secret.byteLength >= MIN_SECRET_BYTES;
            if (!usable) return [row.publicKey, null];
            const tokenTags = [cacheTags.identity(row.id), cacheTags.organizationSettings(row.id)];
            return [row.publicKey, { parentId: row.id, key: await verificationKey(secret), tokenTags }];
          }),
        );
        return { rows: new Map(entries) };
      },
      // Stable tags only: sign-ins (counters, balance) do not drop the key.
      (key, signingKey) => (signingKey ? [cacheTags.publicKey(key), ...signingKey.tokenTags] : [cacheTags.publicKey(key)]),
    ),
  );
  const packagePurchasesByOrganization = new DataLoader<string, PackagePurchase[]>(async (ids) =>
    (
      await throughCache(
        cache,
        'purchases',
        ids,
        async (misses) => {
          const rows = await prisma.packagePurchase.findMany({
            where: { organizationId: { in: misses } },
            orderBy: [{ purchasedAt: 'desc' }, { transactionId: 'desc' }],
          });
          const lists = new Map(
            misses.map((id) => [
              id,
              rows
                .filter((row) => row.organizationId === id)
                .map((row) => ({
                  packageType: row.packageType,
                  purchaseDate: row.purchasedAt,
                  creditsAdded: row.creditsAdded,
                  freeUsersAdded: row.freeUsersAdded,
                  price: row.price.toNumber(),
                  transactionId: row.transactionId,
                })),
            ]),
          );
          return { rows: lists };
        },
        (id) => [cacheTags.purchases(id)],
      )
    ).map((list) => list ?? []),
  );
  /** Keyed by `${organizationId}|${first day of the month, ISO}`. */
  const monthlyUsage = new DataLoader<string, MonthlyUsageTotals | null>((keys) =>
    throughCache(
      cache,
      'usage',
      keys,
      async (misses) => {
        const organizations = misses.map((key) => key.split('|')[0]!);
        const months = misses.map((key) => key.split('|')[1]!.slice(0, 10));
        const { rows, seen } = takeSnapshot(
          await sql.query<MonthlyUsageTotals & { organizationId: string; month: string }>(
            `SELECT u."organizationId", to_char(u.month, 'YYYY-MM-DD') AS month, u."childSignups", u."signIns",
                    u."emailVerifications", u."providerAAuths", u."providerBAuths", u."providerCAuths", u."providerDAuths",
                    ${SNAPSHOT_COLUMN}
             FROM "MonthlyUsage" u JOIN unnest($1::text[], $2::date[]) AS k(id, month)
               ON u."organizationId" = k.id AND u.month = k.month`,
            [organizations, months],
          ),
        );
        const totals = rows.map((row): [string, MonthlyUsageTotals] => [
          `${row.organizationId}|${row.month}T00:00:00.000Z`,
          {
            childSignups: row.childSignups,
            signIns: row.signIns,
            emailVerifications: row.emailVerifications,
            providerAAuths: row.providerAAuths,
            providerBAuths: row.providerBAuths,
            providerCAuths: row.providerCAuths,
            providerDAuths: row.providerDAuths,
          },
        ]);
        return { rows: new Map(totals), seen };
      },
      (key) => [cacheTags.usage(key.split('|')[0]!)],
      { share: true },
    ),
  );
  return {
    accountById,
    accountByPublicKey,
    publicKeyByAccountId,
    organizationSettingsByParentId,
    balancesByParentId,
    signingKeyByPublicKey,
    packagePurchasesByOrganization,
    monthlyUsage,
  };
}
