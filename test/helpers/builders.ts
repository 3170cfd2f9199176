import { randomBytes } from 'node:crypto';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { PACKAGES, type PackageType } from '../../src/domain/catalogue.js';
import type { Database } from '../../src/db/database.js';
import { seedSql } from './database.js';
import type { Account, Organization, Prisma } from '../../src/generated/prisma/client.js';

/** Small builders: each test creates exactly the organizations and children it needs. */

const id = () =>
  randomBytes(10)
    .toString('hex')
    .replace(/[^A-Za-z0-9]/g, '');
let sequence = 0;

export type BuiltOrganization = { parent: Account; organization: Organization };

export async function createOrganization(
  database: Database,
  options: {
    parent?: Partial<Prisma.AccountCreateManyInput>;
    organization?: Partial<Prisma.OrganizationCreateManyInput>;
    purchases?: { type: PackageType; at: Date }[];
    usage?: Omit<Prisma.MonthlyUsageCreateManyInput, 'organizationId'>[];
  } = {},
): Promise<BuiltOrganization> {
  const part = id();
  const createdAt = new Date('2024-01-15T10:00:00.000Z');
  const parent = await database.prisma.account.create({
    data: {
      id: `USR_${part}`,
      type: 'parent',
      username: `parent${++sequence}`,
      email: `parent${sequence}@org${part}.example.com`,
      publicKey: `APK_${part}_${createdAt.getTime()}`,
      status: 'active',
      emailVerified: true,
      createdAt,
      updatedAt: createdAt,
      passwordHash: `LEAKCHECK_PASSWORD_HASH_${part}`,
      ...(options.parent as object),
    } as Prisma.AccountCreateInput,
  });
  const purchases = options.purchases ?? [{ type: 'STARTER' as const, at: new Date('2024-02-01T00:00:00.000Z') }];
  const base = `https://org${part}.example.com`;
  const organization = await database.prisma.organization.create({
    data: {
      parentId: parent.id,
      name: `Organization ${part}`,
      url: base,
      signinUrl: `${base}/signin`,
      signupUrl: `${base}/signup`,
      verifyUrl: `${base}/verify`,
      resetUrl: `${base}/reset`,
      updateUrl: `${base}/update`,
      resendUrl: `${base}/resend`,
      successfulUrl: `${base}/successful`,
      jwtSecret: `LEAKCHECK_JWT_SIGNING_SECRET_${part}_0123456789abcdef`,
      providerASsoClientSecret: `LEAKCHECK_OAUTH_CLIENT_SECRET_${part}`,
      creditBalance: purchases.reduce((sum, p) => sum + PACKAGES[p.type].credits, 0),
      totalFreeUsers: purchases.reduce((sum, p) => sum + PACKAGES[p.type].freeUsers, 0),
      ...(options.organization as object),
      packagePurchases: {
        create: purchases.map((p) => ({
          transactionId: `TXN_${id()}`,
          packageType: p.type,
          purchasedAt: p.at,
          creditsAdded: PACKAGES[p.type].credits,
          freeUsersAdded: PACKAGES[p.type].freeUsers,
          price: (PACKAGES[p.type].priceCents / 100).toFixed(2),
        })),
      },
      monthlyUsage: { create: options.usage ?? [] },
    } as Prisma.OrganizationUncheckedCreateInput,
  });
  return { parent, organization };
}

export async function createChild(
  database: Database,
  parent: Account,
  overrides: Partial<Prisma.AccountCreateManyInput> = {},
): Promise<Account> {
  const part = id();
  const createdAt = (overrides.createdAt as Date | undefined) ?? new Date('2025-03-01T08:00:00.000Z');
  return database.prisma.account.create({
    data: {
      id: `USR_${part}`,
      type: 'child',
      parentId: parent.id,
      username: `child${++sequence}`,
      email: `child${sequence}@example.com`,
      publicKey: `APK_${part}_${createdAt.getTime()}`,
      status: 'active',
      createdAt,
      updatedAt: createdAt,
      ...(overrides as object),
    } as Prisma.AccountUncheckedCreateInput,
  });
}

export function tokenFor(
  account: Pick<Account, 'id'>,
  built: BuiltOrganization,
  options: { ttlSeconds?: number; now?: Date; secret?: string; kid?: string } = {},
): Promise<string> {
  return mintAccessToken({
    secret: options.secret ?? built.organization.jwtSecret,
    kid: options.kid ?? built.parent.publicKey,
    subject: account.id,
    ttlSeconds: options.ttlSeconds ?? 3600,
    now: options.now,
  });
}

/**
 * A sign-in as the sign-in service writes it ($1: the child's id): the child's counters and last
 * login, its parent's organization-wide counters, the balance (one credit spent) and this month's
 * usage, in one transaction.
 */
export const SIGN_IN_SQL = `WITH child AS (UPDATE "Account" SET "signInCount" = "signInCount" + 1, "lastLogin" = now(), "updatedAt" = now() WHERE id = $1 RETURNING "parentId"),
  parent AS (UPDATE "Account" SET "signInCount" = "signInCount" + 1, "updatedAt" = now() WHERE id = (SELECT "parentId" FROM child) RETURNING id),
  spent AS (UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1 WHERE "parentId" = (SELECT id FROM parent) RETURNING "parentId")
  INSERT INTO "MonthlyUsage" ("organizationId", month, "signIns") SELECT "parentId", date_trunc('month', now() AT TIME ZONE 'UTC'), 1 FROM spent
  ON CONFLICT ("organizationId", month) DO UPDATE SET "signIns" = "MonthlyUsage"."signIns" + 1`;

/**
 * `count` children registered a second apart from 2025-01-01, named `${prefix}${i}`, emails padded
 * with `padding` characters; 5,000 a statement, each a seed statement (`seedSql`).
 */
export async function manyChildren(
  database: Database,
  built: BuiltOrganization,
  count: number,
  prefix = 'bulk',
  padding = 0,
): Promise<void> {
  const tag = `${prefix}${built.parent.id.slice(4, 12)}x`;
  for (let from = 0; from < count; from += 5_000) {
    await seedSql(
      database,
      `INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt", "updatedAt")
       SELECT 'USR_' || $2 || i, 'child', $1, $3 || i, $3 || i || repeat('x', $6::int) || '@example.com', 'APK_' || $2 || i || '_1',
              timestamptz '2025-01-01T00:00:00Z' + i * interval '1 second', timestamptz '2025-01-01T00:00:00Z' + i * interval '1 second'
       FROM generate_series($4::int, $5::int - 1) AS i`,
      [built.parent.id, tag, prefix, from, Math.min(count, from + 5_000), padding],
    );
  }
}
