import DataLoader from 'dataloader';
import { hmacKey, MIN_SECRET_BYTES, secretKey, verificationKey, type SigningKey } from '../domain/signing-keys.js';
import { cacheTags } from './cache-tags.js';
import { MISS, type CacheReader, type CachedRead } from './entity-cache.js';
import type { SnapshotQuery } from './snapshots.js';
import { compactAccount, READ_ACCOUNT_COLUMNS, type AccountRow } from './accounts.js';
import type { Organization, PrismaClient } from '../generated/prisma/client.js';
import type { MonthlyUsageTotals, PackagePurchase } from '../domain/credit-analysis.js';

/* Per-request loaders, made when first used, over the process's entity cache: hot paths usually make no query. */

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
export type OrganizationSettings = Omit<Organization, 'creditBalance' | keyof typeof VOLATILE_ORGANIZATION_COLUMNS> & {
  funded: boolean;
};

/** Accounts without their secrets (decisions §7), which are never loaded. */
const ACCOUNT_COLUMNS = READ_ACCOUNT_COLUMNS.map((column) => `"${column}"`).join(', ');

/** Accounts, what a new user's first request misses: plain SQL with the read's snapshot, without the ORM's cost. */
async function accountsWhere(
  query: SnapshotQuery,
  column: 'id' | 'publicKey',
  values: string[],
): Promise<Map<string, AccountRow>> {
  const rows = await query<AccountRow>(ACCOUNT_COLUMNS, `FROM "Account" WHERE "${column}" = ANY($1::text[])`, [values]);
  return new Map(rows.map((a) => [a[column], a]));
}

/** A loader whose cache hits schedule no batch, remembered for the request as loaded values are. */
class ReadThroughLoader<V> extends DataLoader<string, V> {
  private readonly memo: Map<string, Promise<V>>;

  constructor(
    private readonly held: (key: string) => V | typeof MISS,
    batch: DataLoader.BatchLoadFn<string, V>,
    memo = new Map<string, Promise<V>>(),
  ) {
    super(batch, { cacheMap: memo });
    this.memo = memo;
  }

  override load(key: string): Promise<V> {
    const remembered = this.memo.get(key);
    if (remembered !== undefined) return remembered;
    const value = this.held(key);
    if (value === MISS) return super.load(key);
    const promise = Promise.resolve(value);
    this.memo.set(key, promise);
    return promise;
  }
}

export class Loaders {
  #accountById?: DataLoader<string, AccountRow | null>;
  #accountByPublicKey?: DataLoader<string, AccountRow | null>;
  #publicKeyByAccountId?: DataLoader<string, string | null>;
  #organizationSettingsByParentId?: DataLoader<string, OrganizationSettings | null>;
  #balancesByParentId?: DataLoader<string, OrganizationBalances | null>;
  #signingKeyByPublicKey?: DataLoader<string, SigningKey | null>;
  #packagePurchasesByOrganization?: DataLoader<string, PackagePurchase[]>;
  #monthlyUsage?: DataLoader<string, MonthlyUsageTotals | null>;
  #childCountByParentId?: DataLoader<string, number>;

  constructor(
    private readonly prisma: PrismaClient,
    private readonly cache: CacheReader,
  ) {}

  /** A loader of one cached thing: hits at once, misses in one batch; `settle` shapes every value. */
  private readThrough<V, W = V | null>(
    declared: CachedRead<V>,
    settle: (value: V | null) => W = (value) => value as W,
  ): ReadThroughLoader<W> {
    return new ReadThroughLoader<W>(
      (key) => {
        const held = this.cache.hit(declared, key);
        return held === MISS ? MISS : settle(held);
      },
      async (keys) => (await this.cache.throughMany(declared, keys)).map(settle),
    );
  }

  get accountById(): DataLoader<string, AccountRow | null> {
    return (this.#accountById ??= this.readThrough({
      namespace: 'account',
      load: (misses, query) => accountsWhere(query, 'id', misses),
      // Any change to the row announces its id, whatever changed.
      tags: (id) => [cacheTags.account(id)],
      // Every user's own row: held as bytes, so that a large population fits.
      compact: compactAccount,
      share: true,
    }));
  }

  get accountByPublicKey(): DataLoader<string, AccountRow | null> {
    return (this.#accountByPublicKey ??= this.readThrough(
      {
        namespace: 'accountByKey',
        load: (misses, query) => accountsWhere(query, 'publicKey', misses),
        // The key's row changing, or a row taking the key.
        tags: (key, account) =>
          account ? [cacheTags.account(account.id), cacheTags.publicKey(key)] : [cacheTags.publicKey(key)],
        share: true,
      },
      // What is found by key is the account by id for the rest of the request.
      (account) => {
        if (account) this.accountById.prime(account.id, account);
        return account;
      },
    ));
  }

  /** An account's public key: identity, kept while the account's counters change (a parent's do on every sign-in). */
  get publicKeyByAccountId(): DataLoader<string, string | null> {
    return (this.#publicKeyByAccountId ??= this.readThrough({
      namespace: 'publicKeyOf',
      load: async (misses) =>
        new Map(
          (
            await this.prisma.account.findMany({ where: { id: { in: misses } }, select: { id: true, publicKey: true } })
          ).map((a) => [a.id, a.publicKey]),
        ),
      tags: (id) => [cacheTags.identity(id)],
    }));
  }

  /** The organization without its balances: what authentication and most answers need, kept while sign-ins spend. */
  get organizationSettingsByParentId(): DataLoader<string, OrganizationSettings | null> {
    return (this.#organizationSettingsByParentId ??= this.readThrough({
      namespace: 'organizationSettings',
      load: async (misses) => {
        const rows = await this.prisma.organization.findMany({
          where: { parentId: { in: misses } },
          omit: VOLATILE_ORGANIZATION_COLUMNS,
        });
        return new Map(
          rows.map(({ creditBalance, ...settings }) => [settings.parentId, { ...settings, funded: creditBalance > 0 }]),
        );
      },
      tags: (id) => [cacheTags.organizationSettings(id)],
    }));
  }

  /** The organization's balances, which every sign-in changes, read with the snapshot and shared by callers. */
  get balancesByParentId(): DataLoader<string, OrganizationBalances | null> {
    return (this.#balancesByParentId ??= this.readThrough({
      namespace: 'balances',
      load: async (misses, query) => {
        const rows = await query<OrganizationBalances & { parentId: string }>(
          `"parentId", "creditBalance", "accountBalance"::float8 AS "accountBalance", "availableBalance"::float8 AS "availableBalance"`,
          `FROM "Organization" WHERE "parentId" = ANY($1::text[])`,
          [misses],
        );
        return new Map(rows.map(({ parentId, ...balances }) => [parentId, balances]));
      },
      tags: (id) => [cacheTags.organization(id)],
      share: true,
    }));
  }

  /**
   * The HS256 key of a parent's public key (`kid`); null for an unknown key, a child's, or a short secret (decisions
   * §2).
   */
  get signingKeyByPublicKey(): DataLoader<string, SigningKey | null> {
    return (this.#signingKeyByPublicKey ??= this.readThrough<SigningKey | null>({
      namespace: 'signingKey',
      load: async (misses) => {
        const rows = await this.prisma.account.findMany({
          where: { publicKey: { in: misses } },
          select: { id: true, publicKey: true, type: true, organization: { select: { jwtSecret: true } } },
        });
        const entries = await Promise.all(
          rows.map(async (row): Promise<[string, SigningKey | null]> => {
            const secret =
              row.type === 'parent' && row.organization ? secretKey(row.organization.jwtSecret) : undefined;
            const usable = secret !== undefined && secret.byteLength >= MIN_SECRET_BYTES;
            if (!usable) return [row.publicKey, null];
            const tokenTags = [cacheTags.identity(row.id), cacheTags.organizationSettings(row.id)];
            return [
              row.publicKey,
              { parentId: row.id, key: await verificationKey(secret), hmac: hmacKey(secret), tokenTags },
            ];
          }),
        );
        return new Map(entries);
      },
      // Stable tags only: sign-ins (counters, balance) do not drop the key.
      tags: (key, signingKey) =>
        signingKey ? [cacheTags.publicKey(key), ...signingKey.tokenTags] : [cacheTags.publicKey(key)],
    }));
  }

  get packagePurchasesByOrganization(): DataLoader<string, PackagePurchase[]> {
    return (this.#packagePurchasesByOrganization ??= this.readThrough(
      {
        namespace: 'purchases',
        load: async (misses) => {
          const rows = await this.prisma.packagePurchase.findMany({
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
        tags: (id) => [cacheTags.purchases(id)],
      },
      // Every organization read has a list (an empty one without purchases).
      (list) => list ?? [],
    ));
  }

  /** How many children a parent has: counted once, then kept exact from the change feed. */
  get childCountByParentId(): DataLoader<string, number> {
    return (this.#childCountByParentId ??= this.readThrough(
      {
        namespace: 'childCount',
        load: async (misses, query) => {
          const rows = await query<{ parentId: string; children: number }>(
            `"parentId", count(*)::int AS children`,
            `FROM "Account" WHERE "parentId" = ANY($1::text[]) GROUP BY "parentId"`,
            [misses],
          );
          return new Map(rows.map((row) => [row.parentId, row.children]));
        },
        tags: (id) => [cacheTags.childMembers(id)],
        share: true,
        // A child added or removed: counted in place, not again.
        amend: (children, { op }) =>
          op === undefined ? undefined : Math.max(0, (children ?? 0) + (op === 'insert' ? 1 : -1)),
      },
      // A parent without children has no row: none.
      (children) => children ?? 0,
    ));
  }

  /** Keyed by `${organizationId}|${first day of the month, ISO}`. */
  get monthlyUsage(): DataLoader<string, MonthlyUsageTotals | null> {
    return (this.#monthlyUsage ??= this.readThrough({
      namespace: 'usage',
      load: async (misses, query) => {
        const organizations = misses.map((key) => key.split('|')[0]!);
        const months = misses.map((key) => key.split('|')[1]!.slice(0, 10));
        const rows = await query<MonthlyUsageTotals & { organizationId: string; month: string }>(
          `u."organizationId", to_char(u.month, 'YYYY-MM-DD') AS month, u."childSignups", u."signIns",
           u."emailVerifications", u."providerAAuths", u."providerBAuths", u."providerCAuths", u."providerDAuths"`,
          `FROM "MonthlyUsage" u JOIN unnest($1::text[], $2::date[]) AS k(id, month)
             ON u."organizationId" = k.id AND u.month = k.month`,
          [organizations, months],
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
        return new Map(totals);
      },
      tags: (key) => [cacheTags.usage(key.split('|')[0]!)],
      share: true,
    }));
  }
}

export function createLoaders(prisma: PrismaClient, cache: CacheReader): Loaders {
  return new Loaders(prisma, cache);
}
