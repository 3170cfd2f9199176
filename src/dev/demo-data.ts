import { PACKAGES, PACKAGE_TYPES, alertLevel, creditAlerts, type AlertLevel } from '../domain/catalogue.js';
import { randomBytes } from 'node:crypto';
import { Faker, base, en } from '@faker-js/faker';
import { insertOrganization } from '../db/bulk-insert.js';
import type { Database } from '../db/database.js';
import type { Prisma } from '../generated/prisma/client.js';

/*
 * Demo and test data (development tooling: it needs @faker-js/faker, a development dependency;
 * the server loads it only to seed a demo, which production does not do unless asked).
 * The same seed and the same reference time give the same rows, except the secrets: those are
 * drawn at random, so that nobody can reproduce a seeded organization's signing secret. Every
 * secret of decisions §7 carries the marker below, so a test can search any response for it.
 */

export const SECRET_MARKER = 'LEAKCHECK';

export type SeedOptions = {
  organizations: number;
  /** Children of each organization. */
  childrenPerOrganization: number;
  seed: number;
  /** Reference time: registrations, logins and usage are placed relative to it. */
  now: Date;
};

export type SeededOrganization = {
  name: string;
  parent: { userID: string; email: string; publicKey: string };
  children: number;
  alertLevel: AlertLevel;
};

const DAY = 24 * 60 * 60 * 1000;
/** The alert level of organization i is LEVELS[i % 4], so any four organizations cover all levels. */
const LEVELS: AlertLevel[] = ['healthy', 'low', 'critical', 'depleted'];

export async function seed(
  database: Pick<Database, 'prisma' | 'sql'>,
  options: SeedOptions,
): Promise<SeededOrganization[]> {
  const faker = new Faker({ locale: [en, base] });
  faker.seed(options.seed);
  const now = options.now.getTime();
  const created: SeededOrganization[] = [];
  for (let index = 0; index < options.organizations; index++) {
    const level = LEVELS[index % LEVELS.length]!;
    created.push(await seedOrganization(database, faker, now, level, options.childrenPerOrganization));
  }
  return created;
}

function idPart(faker: Faker): string {
  return faker.string.alphanumeric({ length: 20 });
}

/** A secret: random, not from the seeded generator (which does not advance for it). */
function secret(kind: string): string {
  return `${SECRET_MARKER}_${kind}_${randomBytes(24).toString('hex')}`;
}

function between(faker: Faker, from: number, to: number): Date {
  return new Date(Math.floor(from + faker.number.float({ min: 0, max: 1 }) * Math.max(0, to - from)));
}

const COUNTER_KEYS = [
  'childSignupCount',
  'signInCount',
  'emailConfirmationCount',
  'providerAAuthCount',
  'providerBAuthCount',
  'providerCAuthCount',
  'providerDAuthCount',
] as const;

async function seedOrganization(
  database: Pick<Database, 'prisma' | 'sql'>,
  faker: Faker,
  now: number,
  level: AlertLevel,
  childCount: number,
): Promise<SeededOrganization> {
  const company = faker.company.name();
  const slug = `${faker.helpers
    .slugify(company)
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '')
    .replace(/-+/g, '-')
    .slice(0, 30)}-${faker.string.alphanumeric({ length: 4, casing: 'lower' })}`;
  const domain = `${slug}.example.com`;
  const url = `https://${domain}`;
  const parentPart = idPart(faker);
  const parentId = `USR_${parentPart}`;
  const parentCreated = now - 760 * DAY - faker.number.int({ min: 0, max: 60 }) * DAY;
  const publicKey = `APK_${parentPart}_${parentCreated}`;

  const purchases = seedPurchases(faker, parentId, parentCreated, now);
  const purchased = purchases.reduce((sum, p) => sum + p.creditsAdded, 0);
  const freeUsers = purchases.reduce((sum, p) => sum + p.freeUsersAdded, 0);
  const balance = balanceFor(faker, level, purchased);
  const spentCents = purchases.reduce((sum, p) => sum + Number(p.price) * 100, 0);
  const availableCents = Math.round((spentCents * Math.max(balance, 0)) / Math.max(purchased, 1));

  const children: Prisma.AccountCreateManyInput[] = [];
  const totals = Object.fromEntries(COUNTER_KEYS.map((key) => [key, 0])) as Record<
    (typeof COUNTER_KEYS)[number],
    number
  >;
  for (let i = 0; i < childCount; i++) {
    const child = seedChild(faker, parentId, domain, i, now);
    for (const key of COUNTER_KEYS) totals[key] += child[key] as number;
    children.push(child);
  }
  const parentLogins = faker.number.int({ min: 20, max: 400 });

  const parent: Prisma.AccountCreateManyInput = {
    id: parentId,
    type: 'parent',
    username: `${slug}-admin`,
    email: `admin@${domain}`,
    publicKey,
    status: 'active',
    emailVerified: true,
    createdAt: new Date(parentCreated),
    updatedAt: between(faker, now - 30 * DAY, now),
    lastLogin: between(faker, now - 2 * DAY, now),
    authProvider: 'email',
    lastLoginProvider: 'email',
    // decisions §1: a parent's counters count the whole organization.
    ...totals,
    signInCount: totals.signInCount + parentLogins,
    emailConfirmationCount: totals.emailConfirmationCount + 1,
    lastPasswordChanged: between(faker, parentCreated, now),
    loginAttempts: 0,
    lastLoginAttempt: between(faker, now - 2 * DAY, now),
    passwordHash: secret('PASSWORD_HASH'),
    emailVerificationToken: secret('EMAIL_VERIFICATION_TOKEN'),
    passwordResetToken: secret('PASSWORD_RESET_TOKEN'),
  };
  const notified = (levels: AlertLevel[]) => (levels.includes(level) ? between(faker, now - 20 * DAY, now) : null);
  const organization: Prisma.OrganizationCreateManyInput = {
    parentId,
    name: company,
    url,
    signinUrl: `${url}/auth/signin`,
    signupUrl: `${url}/auth/signup`,
    verifyUrl: `${url}/auth/verify`,
    resetUrl: `${url}/auth/reset`,
    updateUrl: `${url}/auth/update`,
    resendUrl: `${url}/auth/resend`,
    successfulUrl: `${url}/auth/successful`,
    domainRestrictionEnabled: faker.datatype.boolean({ probability: 0.8 }),
    emailVerificationRequired: faker.datatype.boolean({ probability: 0.3 }),
    providerASsoEnabled: faker.datatype.boolean({ probability: 0.5 }),
    providerASsoClientId: `${faker.string.numeric(12)}-${faker.string.alphanumeric({ length: 24, casing: 'lower' })}.apps.example.com`,
    providerASsoClientSecret: secret('OAUTH_CLIENT_SECRET'),
    jwtSecret: secret('JWT_SIGNING_SECRET'),
    encryptionKey: secret('ENCRYPTION_KEY'),
    encryptionIv: secret('ENCRYPTION_IV'),
    creditBalance: balance,
    totalFreeUsers: freeUsers,
    accountBalance: (spentCents / 100).toFixed(2),
    availableBalance: (availableCents / 100).toFixed(2),
    lastLowCreditNotificationAt: notified(['low', 'critical', 'depleted']),
    lastCriticalCreditNotificationAt: notified(['critical', 'depleted']),
    lastDepletedCreditNotificationAt: notified(['depleted']),
    createdAt: new Date(parentCreated),
    updatedAt: between(faker, now - 30 * DAY, now),
  };
  const usage = seedUsage(faker, parentId, parentCreated, now);

  await insertOrganization(database, { parent, organization, purchases, usage, children });
  const seededLevel = alertLevel(creditAlerts(balance, purchased));
  return {
    name: company,
    parent: { userID: parentId, email: parent.email, publicKey },
    children: childCount,
    alertLevel: seededLevel,
  };
}

function seedPurchases(
  faker: Faker,
  organizationId: string,
  orgCreated: number,
  now: number,
): Prisma.PackagePurchaseCreateManyInput[] {
  const count = faker.number.int({ min: 1, max: 4 });
  return Array.from({ length: count }, () => {
    const type = faker.helpers.arrayElement(PACKAGE_TYPES);
    const pack = PACKAGES[type];
    return {
      transactionId: `TXN_${faker.string.alphanumeric({ length: 24, casing: 'upper' })}`,
      organizationId,
      packageType: type,
      purchasedAt: between(faker, orgCreated, now),
      creditsAdded: pack.credits,
      freeUsersAdded: pack.freeUsers,
      price: (pack.priceCents / 100).toFixed(2),
    };
  });
}

/** A balance that puts the organization at the wanted alert level, well inside its band. */
function balanceFor(faker: Faker, level: AlertLevel, purchased: number): number {
  const share = (min: number, max: number) => Math.round(purchased * faker.number.float({ min, max }));
  switch (level) {
    case 'healthy':
      return share(0.35, 0.9);
    case 'low':
      return share(0.12, 0.18);
    case 'critical':
      return Math.max(1, share(0.01, 0.08));
    case 'depleted':
      return faker.datatype.boolean() ? 0 : -faker.number.int({ min: 1, max: 500 });
  }
}

function seedChild(
  faker: Faker,
  parentId: string,
  domain: string,
  index: number,
  now: number,
): Prisma.AccountCreateManyInput {
  const part = idPart(faker);
  const first = faker.person.firstName();
  const last = faker.person.lastName();
  const username = `${first}.${last}`.toLowerCase().replace(/[^a-z0-9.]/g, '') + index;
  const createdAt = now - faker.number.int({ min: 60_000, max: 730 * DAY });
  const activity = faker.helpers.weightedArrayElement([
    { weight: 10, value: 'never' as const },
    { weight: 45, value: 'recent' as const },
    { weight: 45, value: 'stale' as const },
  ]);
  let lastLogin: Date | null = null;
  if (activity === 'recent' || (activity === 'stale' && createdAt > now - 31 * DAY)) {
    lastLogin = between(faker, Math.max(createdAt, now - 29 * DAY), now);
  } else if (activity === 'stale') {
    lastLogin = between(faker, createdAt, now - 31 * DAY);
  }
  const status = faker.helpers.weightedArrayElement([
    { weight: 85, value: 'active' as const },
    { weight: 8, value: 'inactive' as const },
    { weight: 7, value: 'locked' as const },
  ]);
  const lockedUntil =
    status === 'locked'
      ? faker.datatype.boolean()
        ? between(faker, now + 60 * 60 * 1000, now + 7 * DAY)
        : between(faker, now - 30 * DAY, now - DAY)
      : null;
  const provider = faker.helpers.weightedArrayElement([
    { weight: 75, value: 'email' as const },
    { weight: 25, value: 'providerA' as const },
  ]);
  const signIns = lastLogin ? faker.number.int({ min: 1, max: 200 }) : 0;
  const social = (weight: number) => (lastLogin ? faker.number.int({ min: 0, max: weight }) : 0);
  const emailVerified = faker.datatype.boolean({ probability: 0.8 });
  const updatedAt = lastLogin ?? new Date(createdAt);
  return {
    id: `USR_${part}`,
    type: 'child',
    parentId,
    username,
    email: `${username}@${domain}`,
    publicKey: `APK_${part}_${createdAt}`,
    status,
    emailVerified,
    createdAt: new Date(createdAt),
    updatedAt,
    lastLogin,
    authProvider: provider,
    lastLoginProvider: lastLogin ? provider : null,
    providerAId: provider === 'providerA' ? faker.string.numeric(21) : null,
    childSignupCount: 1,
    signInCount: signIns,
    emailConfirmationCount: emailVerified ? 1 : 0,
    providerAAuthCount: provider === 'providerA' ? signIns : 0,
    providerBAuthCount: social(3),
    providerCAuthCount: social(2),
    providerDAuthCount: social(1),
    lastPasswordChanged: faker.datatype.boolean({ probability: 0.3 }) ? between(faker, createdAt, now) : null,
    loginAttempts: status === 'locked' ? 5 : faker.number.int({ min: 0, max: 2 }),
    lastLoginAttempt: lastLogin,
    lockedUntil,
    lastResetPasswordRequestAt: faker.datatype.boolean({ probability: 0.1 }) ? between(faker, createdAt, now) : null,
    passwordHash: provider === 'email' ? secret('PASSWORD_HASH') : null,
    emailVerificationToken: emailVerified ? null : secret('EMAIL_VERIFICATION_TOKEN'),
    passwordResetToken: faker.datatype.boolean({ probability: 0.05 }) ? secret('PASSWORD_RESET_TOKEN') : null,
  };
}

/** Monthly usage totals for the past year and the current month so far (decisions §5). */
function seedUsage(
  faker: Faker,
  organizationId: string,
  orgCreated: number,
  now: number,
): Prisma.MonthlyUsageCreateManyInput[] {
  const rows: Prisma.MonthlyUsageCreateManyInput[] = [];
  const current = new Date(now);
  for (let back = 12; back >= 0; back--) {
    const month = new Date(Date.UTC(current.getUTCFullYear(), current.getUTCMonth() - back, 1));
    if (month.getTime() < orgCreated - 31 * DAY) continue;
    const scale = back === 0 ? Math.max(0.05, (now - month.getTime()) / (30 * DAY)) : 1;
    const n = (max: number) => Math.round(faker.number.int({ min: 0, max }) * scale);
    rows.push({
      organizationId,
      month,
      childSignups: n(300),
      signIns: n(6000),
      emailVerifications: n(250),
      providerAAuths: n(900),
      providerBAuths: n(300),
      providerCAuths: n(150),
      providerDAuths: n(100),
    });
  }
  return rows;
}
