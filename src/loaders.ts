import DataLoader from 'dataloader';
import type { Account, Organization, PrismaClient } from './generated/prisma/client.js';
import type { MonthlyUsageTotals, PackagePurchase } from './domain/credit-analysis.js';

/** Per-request loaders: each batches the lookups of one request into one query and caches them. */
export type Loaders = ReturnType<typeof createLoaders>;

function byKey<K, V>(keys: readonly K[], rows: V[], keyOf: (row: V) => K): (V | null)[] {
  const map = new Map(rows.map((row) => [keyOf(row), row]));
  return keys.map((key) => map.get(key) ?? null);
}

export function createLoaders(prisma: PrismaClient) {
  const accountById = new DataLoader<string, Account | null>(async (ids) =>
    byKey(ids, await prisma.account.findMany({ where: { id: { in: [...ids] } } }), (a) => a.id),
  );
  const accountByPublicKey = new DataLoader<string, Account | null>(async (keys) => {
    const rows = await prisma.account.findMany({ where: { publicKey: { in: [...keys] } } });
    for (const row of rows) accountById.prime(row.id, row);
    return byKey(keys, rows, (a) => a.publicKey);
  });
  const organizationByParentId = new DataLoader<string, Organization | null>(async (ids) =>
    byKey(ids, await prisma.organization.findMany({ where: { parentId: { in: [...ids] } } }), (o) => o.parentId),
  );
  const packagePurchasesByOrganization = new DataLoader<string, PackagePurchase[]>(async (ids) => {
    const rows = await prisma.packagePurchase.findMany({
      where: { organizationId: { in: [...ids] } },
      orderBy: [{ purchasedAt: 'desc' }, { transactionId: 'desc' }],
    });
    return ids.map((id) =>
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
    );
  });
  /** Keyed by `${organizationId}|${first day of the month, ISO}`. */
  const monthlyUsage = new DataLoader<string, MonthlyUsageTotals | null>(async (keys) => {
    const pairs = keys.map((key) => {
      const [organizationId, month] = key.split('|') as [string, string];
      return { organizationId, month: new Date(month) };
    });
    const rows = await prisma.monthlyUsage.findMany({ where: { OR: pairs } });
    return byKey(keys, rows, (row) => `${row.organizationId}|${row.month.toISOString()}`);
  });
  return {
    accountById,
    accountByPublicKey,
    organizationByParentId,
    packagePurchasesByOrganization,
    monthlyUsage,
  };
}
