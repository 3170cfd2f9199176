import DataLoader from 'dataloader';
import { MIN_SECRET_BYTES, secretKey, verificationKey, type SigningKey } from './auth/tokens.js';
import { cacheTags, type EntityCache } from './db/entity-cache.js';
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

/** An organization as authentication and most answers see it: no balances, and whether it has credits left. */
export type OrganizationSettings = Omit<Organization, 'creditBalance' | keyof typeof VOLATILE_ORGANIZATION_COLUMNS> & { funded: boolean };

/**
 * Answers `keys` from the cache, loads the misses in one query, and stores what was loaded with
 * the tags of the rows it came from (a `null` is stored too: "no such row" until one is announced).
 */
async function throughCache<V, Stored = V>(
  cache: EntityCache,
  namespace: string,
  keys: readonly string[],
  load: (misses: string[]) => Promise<Map<string, V>>,
  tags: (key: string, value: V | null) => readonly string[],
  /** How a value is held in the cache, when a more compact form than the value itself pays. */
  form?: { pack: (value: V) => Stored; unpack: (stored: Stored) => V },
): Promise<(V | null)[]> {
  const results: (V | null | undefined)[] = keys.map((key) => {
    const stored = cache.get<Stored | null>(`${namespace}:${key}`)?.value;
    return stored === undefined || stored === null || !form ? (stored as V | null | undefined) : form.unpack(stored);
  });
  const misses = keys.filter((_, i) => results[i] === undefined);
  if (misses.length === 0) return results as (V | null)[];
  const ticket = cache.ticket();
  const found = await load(misses);
  return keys.map((key, i) => {
    if (results[i] !== undefined) return results[i];
    const value = found.get(key) ?? null;
    cache.set(ticket, `${namespace}:${key}`, value !== null && form ? form.pack(value) : value, tags(key, value));
    return value;
  });
}

/** Accounts without their secrets (decisions §7), which are never loaded. */
const SELECT_ACCOUNTS = `SELECT ${READ_ACCOUNT_COLUMNS.map((column) => `"${column}"`).join(', ')} FROM "Account"`;

export function createLoaders(prisma: PrismaClient, sql: SqlDriver, cache: EntityCache) {
  const accountForm = { pack: packAccount, unpack: unpackAccount };
  // Accounts are what a new user's first request misses: one plain SQL statement on the pool
  // (the driver types the columns as Prisma does), without the ORM's per-query cost.
  const accountsWhere = async (column: 'id' | 'publicKey', values: string[]) =>
    sql.query<AccountRow>(`${SELECT_ACCOUNTS} WHERE "${column}" = ANY($1::text[])`, [values]);

  const accountById = new DataLoader<string, AccountRow | null>((ids) =>
    throughCache(
      cache,
      'account',
      ids,
      async (misses) => new Map((await accountsWhere('id', misses)).map((a) => [a.id, a])),
      // Any change to the row announces its id, whatever changed.
      (id) => [cacheTags.account(id)],
      accountForm,
    ),
  );
  const accountByPublicKey = new DataLoader<string, AccountRow | null>(async (keys) => {
    const accounts = await throughCache(
      cache,
      'accountByKey',
      keys,
      async (misses) => new Map((await accountsWhere('publicKey', misses)).map((a) => [a.publicKey, a])),
      // The key's row changing, or a row taking the key.
      (key, account) => (account ? [cacheTags.account(account.id), cacheTags.publicKey(key)] : [cacheTags.publicKey(key)]),
      accountForm,
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
      async (misses) =>
        new Map(
          (await prisma.account.findMany({ where: { id: { in: misses } }, select: { id: true, publicKey: true } })).map((a) => [a.id, a.publicKey]),
        ),
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
        return new Map(rows.map(({ creditBalance, ...settings }) => [settings.parentId, { ...settings, funded: creditBalance > 0 }]));
      },
      (id) => [cacheTags.organizationSettings(id)],
    ),
  );
  const organizationByParentId = new DataLoader<string, Organization | null>((ids) =>
    throughCache(
      cache,
      'organization',
      ids,
      async (misses) =>
        new Map((await prisma.organization.findMany({ where: { parentId: { in: misses } } })).map((o) => [o.parentId, o])),
      (id) => [cacheTags.organization(id)],
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
        return new Map(entries);
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
          return new Map(
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
        const pairs = misses.map((key) => {
          const [organizationId, month] = key.split('|') as [string, string];
          return { organizationId, month: new Date(month) };
        });
        const rows = await prisma.monthlyUsage.findMany({ where: { OR: pairs } });
        return new Map(rows.map((row) => [`${row.organizationId}|${row.month.toISOString()}`, row]));
      },
      (key) => [cacheTags.usage(key.split('|')[0]!)],
    ),
  );
  return {
    accountById,
    accountByPublicKey,
    publicKeyByAccountId,
    organizationSettingsByParentId,
    organizationByParentId,
    signingKeyByPublicKey,
    packagePurchasesByOrganization,
    monthlyUsage,
  };
}
