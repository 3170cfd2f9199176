import { alertLevel, creditAlerts, type AlertLevel } from '../domain/catalogue.js';
import type { Account, Prisma, PrismaClient } from '../generated/prisma/client.js';
import { dateOf, dateText, enumOf, enumText, enumValues, FIELD, optionalOf, optionalText } from './compact-text.js';

/** The Account columns with their SQL types (the bulk insert casts its arrays to them). */
export const ACCOUNT_COLUMN_TYPES: Record<keyof Prisma.AccountCreateManyInput, string> = {
  id: 'text',
  type: '"AccountType"',
  parentId: 'text',
  username: 'text',
  email: 'text',
  publicKey: 'text',
  status: '"AccountStatus"',
  emailVerified: 'boolean',
  createdAt: 'timestamptz',
  updatedAt: 'timestamptz',
  lastLogin: 'timestamptz',
  authProvider: '"AuthProvider"',
  lastLoginProvider: '"AuthProvider"',
  providerAId: 'text',
  childSignupCount: 'integer',
  signInCount: 'integer',
  emailConfirmationCount: 'integer',
  providerAAuthCount: 'integer',
  providerBAuthCount: 'integer',
  providerCAuthCount: 'integer',
  providerDAuthCount: 'integer',
  lastPasswordChanged: 'timestamptz',
  loginAttempts: 'integer',
  lastLoginAttempt: 'timestamptz',
  lockedUntil: 'timestamptz',
  lastResetPasswordRequestAt: 'timestamptz',
  passwordHash: 'text',
  emailVerificationToken: 'text',
  passwordResetToken: 'text',
};

/** decisions §7: never returned, so never read. */
const SECRET_ACCOUNT_COLUMNS = ['passwordHash', 'emailVerificationToken', 'passwordResetToken'] as const;

/** An account row as the API holds it: every column but the secrets. */
export type AccountRow = Omit<Account, (typeof SECRET_ACCOUNT_COLUMNS)[number]>;

/** The columns the API reads, for `SELECT`s of accounts. */
export const READ_ACCOUNT_COLUMNS = (Object.keys(ACCOUNT_COLUMN_TYPES) as (keyof Account)[]).filter(
  (column): column is keyof AccountRow => !(SECRET_ACCOUNT_COLUMNS as readonly string[]).includes(column),
);

/** An organization as `npm run token -- --list` and the development start banner show it. */
export type OrganizationSummary = {
  name: string;
  alertLevel: AlertLevel;
  parent: { userID: string; email: string; publicKey: string };
  /** The newest active child's email, if any. */
  childEmail: string | undefined;
};

/** The first `limit` organizations, oldest parent first. */
export async function listOrganizations(prisma: PrismaClient, limit: number): Promise<OrganizationSummary[]> {
  const organizations = await prisma.organization.findMany({
    take: limit,
    orderBy: [{ parent: { createdAt: 'asc' } }, { parentId: 'asc' }],
    select: {
      name: true,
      creditBalance: true,
      parent: { select: { id: true, email: true, publicKey: true } },
      packagePurchases: { select: { creditsAdded: true } },
    },
  });
  const summaries: OrganizationSummary[] = [];
  for (const org of organizations) {
    const purchased = org.packagePurchases.reduce((sum, p) => sum + p.creditsAdded, 0);
    const child = await prisma.account.findFirst({
      where: { parentId: org.parent.id, status: 'active' },
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
      select: { email: true },
    });
    summaries.push({
      name: org.name,
      alertLevel: alertLevel(creditAlerts(org.creditBalance, purchased)),
      parent: { userID: org.parent.id, email: org.parent.email, publicKey: org.parent.publicKey },
      childEmail: child?.email,
    });
  }
  return summaries;
}

/** Three lines per organization: its name and alert level, its parent, one child. */
export function describeOrganizations(organizations: OrganizationSummary[], indent = ''): string[] {
  return organizations.flatMap((org) => [
    `${indent}${org.name} (${org.alertLevel})`,
    `${indent}  parent ${org.parent.email}  ${org.parent.userID}  public key ${org.parent.publicKey}`,
    `${indent}  child  ${org.childEmail ?? '(no active child)'}`,
  ]);
}

export type TokenSubject =
  | { kind: 'found'; userID: string; kid: string; secret: string; accountType: 'parent' | 'child' }
  | { kind: 'ambiguous'; userIDs: string[] }
  | { kind: 'none' };

/** The account a development token is minted for, by userID or email, with its organization's key and secret. */
export async function findTokenSubject(prisma: PrismaClient, who: string): Promise<TokenSubject> {
  const accounts = await prisma.account.findMany({
    where: who.startsWith('USR_') ? { id: who } : { email: { equals: who, mode: 'insensitive' } },
    select: { id: true, type: true, parentId: true },
    take: 10,
  });
  if (accounts.length === 0) return { kind: 'none' };
  if (accounts.length > 1) return { kind: 'ambiguous', userIDs: accounts.map((a) => a.id) };
  const account = accounts[0]!;
  const organization = await prisma.organization.findUnique({
    where: { parentId: account.parentId ?? account.id },
    select: { jwtSecret: true, parent: { select: { publicKey: true } } },
  });
  if (!organization) return { kind: 'none' };
  return {
    kind: 'found',
    userID: account.id,
    kid: organization.parent.publicKey,
    secret: organization.jwtSecret,
    accountType: account.type,
  };
}

const ACCOUNT_TYPES = enumValues<AccountRow['type']>({ parent: 0, child: 1 });
const ACCOUNT_STATUSES = enumValues<AccountRow['status']>({ active: 0, inactive: 1, locked: 2 });
const AUTH_PROVIDERS = enumValues<AccountRow['authProvider']>({
  email: 0,
  providerA: 1,
  providerB: 2,
  providerC: 3,
  providerD: 4,
});

/** An account row as text for the record ring, without its id: about 210 bytes for a child. */
export const compactAccount = {
  encode(row: AccountRow): string {
    // The id is the record's key: not held twice.
    return [
      enumText(row.type, ACCOUNT_TYPES),
      optionalText(row.parentId),
      row.username,
      row.email,
      row.publicKey,
      enumText(row.status, ACCOUNT_STATUSES),
      row.emailVerified ? '1' : '0',
      dateText(row.createdAt),
      dateText(row.updatedAt),
      dateText(row.lastLogin),
      enumText(row.authProvider, AUTH_PROVIDERS),
      row.lastLoginProvider === null ? '' : enumText(row.lastLoginProvider, AUTH_PROVIDERS),
      optionalText(row.providerAId),
      row.childSignupCount,
      row.signInCount,
      row.emailConfirmationCount,
      row.providerAAuthCount,
      row.providerBAuthCount,
      row.providerCAuthCount,
      row.providerDAuthCount,
      dateText(row.lastPasswordChanged),
      row.loginAttempts,
      dateText(row.lastLoginAttempt),
      dateText(row.lockedUntil),
      dateText(row.lastResetPasswordRequestAt),
    ].join(FIELD);
  },
  /** The row again as one object literal; `test/record-ring.test.ts` checks every column's round trip. */
  decode(text: string, id: string): AccountRow {
    const v = text.split(FIELD);
    return {
      id,
      type: enumOf(v[0]!, ACCOUNT_TYPES),
      parentId: optionalOf(v[1]!),
      username: v[2]!,
      email: v[3]!,
      publicKey: v[4]!,
      status: enumOf(v[5]!, ACCOUNT_STATUSES),
      emailVerified: v[6] === '1',
      createdAt: dateOf(v[7]!)!,
      updatedAt: dateOf(v[8]!)!,
      lastLogin: dateOf(v[9]!),
      authProvider: enumOf(v[10]!, AUTH_PROVIDERS),
      lastLoginProvider: v[11] === '' ? null : enumOf(v[11]!, AUTH_PROVIDERS),
      providerAId: optionalOf(v[12]!),
      childSignupCount: Number(v[13]),
      signInCount: Number(v[14]),
      emailConfirmationCount: Number(v[15]),
      providerAAuthCount: Number(v[16]),
      providerBAuthCount: Number(v[17]),
      providerCAuthCount: Number(v[18]),
      providerDAuthCount: Number(v[19]),
      lastPasswordChanged: dateOf(v[20]!),
      loginAttempts: Number(v[21]),
      lastLoginAttempt: dateOf(v[22]!),
      lockedUntil: dateOf(v[23]!),
      lastResetPasswordRequestAt: dateOf(v[24]!),
    };
  },
};

if (READ_ACCOUNT_COLUMNS[0] !== 'id') throw new Error('compactAccount: the id must be the first column read');
