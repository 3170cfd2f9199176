import type { Prisma, PrismaClient } from '../generated/prisma/client.js';
import { ACCOUNT_COLUMN_TYPES } from './accounts.js';
import type { Database, SqlDriver } from './database.js';

/*
 * Writes whole organizations (parent, organization, purchases, usage, children) as given: the
 * demo and test data generators produce the rows, this writes them in few statements.
 */

/** One organization's rows, ready to insert. */
export type OrganizationRows = {
  parent: Prisma.AccountCreateManyInput;
  organization: Prisma.OrganizationCreateManyInput;
  purchases: Prisma.PackagePurchaseCreateManyInput[];
  usage: Prisma.MonthlyUsageCreateManyInput[];
  children: Prisma.AccountCreateManyInput[];
};

/** Children per INSERT: one array parameter per column, so the batch size is not bound by parameter limits. */
const CHILD_BATCH = 5000;

export class SeedConflictError extends Error {}

/** decisions §2 signing secrets: HS256 keys of at least 32 bytes. */
export function assertStrongSecret(secret: string, organization: string): void {
  if (Buffer.byteLength(secret) < 32) {
    throw new SeedConflictError(`the signing secret of ${organization} is shorter than 32 bytes`);
  }
}

/** Inserts one organization; refuses (SeedConflictError) if its parent account exists already. */
export async function insertOrganization(
  { prisma, sql }: Pick<Database, 'prisma' | 'sql'>,
  rows: OrganizationRows,
): Promise<void> {
  const { parent, organization } = rows;
  assertStrongSecret(organization.jwtSecret, organization.name);
  const existing = await prisma.account.findUnique({ where: { id: parent.id }, select: { id: true } });
  if (existing) {
    throw new SeedConflictError(
      `account ${parent.id} already exists: this seed was applied before (use --reset, or another --seed)`,
    );
  }
  await prisma.$transaction([
    prisma.account.create({ data: parent as Prisma.AccountCreateInput }),
    prisma.organization.createMany({ data: [organization] }),
    prisma.packagePurchase.createMany({ data: rows.purchases }),
    prisma.monthlyUsage.createMany({ data: rows.usage }),
  ]);
  for (let start = 0; start < rows.children.length; start += CHILD_BATCH) {
    await insertAccounts(sql, rows.children.slice(start, start + CHILD_BATCH));
  }
}

/**
 * Many accounts in one statement: each column travels as one array and `unnest` turns the arrays
 * back into rows. Prisma's createMany costs about a millisecond a row here; this is ~50x faster.
 */
export async function insertAccounts(sql: SqlDriver, rows: Prisma.AccountCreateManyInput[]): Promise<void> {
  const columns = Object.keys(ACCOUNT_COLUMN_TYPES) as (keyof Prisma.AccountCreateManyInput)[];
  const values = columns.map((column) =>
    rows.map((row) => {
      const value = row[column];
      if (value === undefined || value === null) return null;
      return value instanceof Date ? value.toISOString() : value;
    }),
  );
  // Enum arrays travel as text[] (drivers know how to send those) and are cast back per row.
  const arrayType = (type: string) => (type.startsWith('"') ? 'text' : type);
  await sql.query(
    `INSERT INTO "Account" (${columns.map((c) => `"${c}"`).join(', ')})
     SELECT ${columns.map((c, i) => `c${i}::${ACCOUNT_COLUMN_TYPES[c]}`).join(', ')}
     FROM unnest(${columns.map((c, i) => `$${i + 1}::${arrayType(ACCOUNT_COLUMN_TYPES[c])}[]`).join(', ')})
       AS u(${columns.map((_, i) => `c${i}`).join(', ')})`,
    values,
  );
}

/** Removes every row of the product's tables (for `db:seed --reset`). */
export async function resetData(prisma: PrismaClient): Promise<void> {
  await prisma.$transaction([
    prisma.monthlyUsage.deleteMany(),
    prisma.packagePurchase.deleteMany(),
    prisma.organization.deleteMany(),
    prisma.account.deleteMany({ where: { type: 'child' } }),
    prisma.account.deleteMany(),
  ]);
}
