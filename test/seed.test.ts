import { describe, expect, it } from 'vitest';
import { PACKAGES, alertLevel, creditAlerts } from '../src/domain/catalogue.js';
import { loadConfig } from '../src/config.js';
import { SeedConflictError } from '../src/db/bulk-insert.js';
import { SECRET_MARKER, seed } from '../src/dev/demo-data.js';
import { createTestDatabase, testMode, useTestDatabase, type TestDatabase } from './helpers/database.js';

const DAY = 24 * 60 * 60 * 1000;
const now = new Date('2026-06-15T12:00:00.000Z');

async function dump(database: TestDatabase) {
  const p = database.prisma;
  return {
    accounts: await p.account.findMany({ orderBy: { id: 'asc' } }),
    organizations: await p.organization.findMany({ orderBy: { parentId: 'asc' } }),
    purchases: await p.packagePurchase.findMany({ orderBy: { transactionId: 'asc' } }),
    usage: await p.monthlyUsage.findMany({ orderBy: [{ organizationId: 'asc' }, { month: 'asc' }] }),
  };
}

describe(`seed (${testMode})`, () => {
  it('is deterministic: the same seed and reference time give the same rows, but never the same secrets; another seed does not', async () => {
    const options = { organizations: 2, childrenPerOrganization: 40, seed: 7, now };
    const [a, b, c] = await Promise.all([createTestDatabase(), createTestDatabase(), createTestDatabase()]);
    try {
      const [summaryA, summaryB] = [await seed(a, options), await seed(b, options)];
      await seed(c, { ...options, seed: 8 });
      expect(summaryA).toEqual(summaryB);
      const [dumpA, dumpB, dumpC] = [await dump(a), await dump(b), await dump(c)];
      expect(dumpA.accounts).toHaveLength(2 + 80);
      // Secrets are random: nobody can rebuild a seeded organization's signing secret from the seed.
      const secrets = (value: unknown): string[] =>
        JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v)).match(
          new RegExp(`${SECRET_MARKER}_[A-Z_]+_[0-9a-f]+`, 'g'),
        ) ?? [];
      const secretsA = secrets(dumpA);
      expect(secretsA.length).toBeGreaterThan(10);
      expect(secretsA.filter((secret) => secrets(dumpB).includes(secret))).toEqual([]);
      expect(new Set(secretsA).size).toBe(secretsA.length);
      const text = (value: unknown) =>
        JSON.stringify(value, (_, v) =>
          typeof v === 'bigint'
            ? v.toString()
            : typeof v === 'string' && v.startsWith(`${SECRET_MARKER}_`)
              ? v.replace(/_[0-9a-f]+$/, '_…')
              : v,
        );
      expect(text(dumpA)).toBe(text(dumpB));
      expect(dumpC.accounts.map((x) => x.id)).not.toEqual(dumpA.accounts.map((x) => x.id));
      await expect(seed(a, options)).rejects.toBeInstanceOf(SeedConflictError);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });

  describe('keeps the distributions it promises', () => {
    const database = useTestDatabase();
    const options = { organizations: 4, childrenPerOrganization: 400, seed: 3, now };

    it('one organization at each alert level, with consistent purchases and notifications', async () => {
      const summary = await seed(database(), options);
      expect(summary.map((o) => o.alertLevel)).toEqual(['healthy', 'low', 'critical', 'depleted']);
      for (const org of summary) {
        const row = await database().prisma.organization.findUniqueOrThrow({
          where: { parentId: org.parent.userID },
          include: { packagePurchases: true },
        });
        expect(row.packagePurchases.length).toBeGreaterThan(0);
        for (const purchase of row.packagePurchases) {
          const pack = PACKAGES[purchase.packageType];
          expect(purchase.creditsAdded).toBe(pack.credits);
          expect(purchase.freeUsersAdded).toBe(pack.freeUsers);
          expect(purchase.price.toFixed(2)).toBe((pack.priceCents / 100).toFixed(2));
        }
        const purchased = row.packagePurchases.reduce((sum, p) => sum + p.creditsAdded, 0);
        expect(alertLevel(creditAlerts(row.creditBalance, purchased))).toBe(org.alertLevel);
        expect(row.totalFreeUsers).toBe(row.packagePurchases.reduce((sum, p) => sum + p.freeUsersAdded, 0));
        expect(row.lastDepletedCreditNotificationAt !== null).toBe(org.alertLevel === 'depleted');
        expect(row.lastLowCreditNotificationAt !== null).toBe(org.alertLevel !== 'healthy');
        expect(org.children).toBe(400);
        expect(await database().prisma.account.count({ where: { parentId: org.parent.userID } })).toBe(400);
        expect(org.parent.publicKey).toMatch(/^APK_[A-Za-z0-9]+_[0-9]+$/);
        expect(org.parent.userID).toMatch(/^USR_[A-Za-z0-9]+$/);
      }
    });

    it('children with mixed statuses, two years of registrations and mixed login activity', async () => {
      const children = await database().prisma.account.findMany({ where: { type: 'child' } });
      expect(children).toHaveLength(1600);
      const count = (predicate: (c: (typeof children)[number]) => boolean) => children.filter(predicate).length;
      expect(count((c) => c.status === 'active')).toBeGreaterThan(1200);
      expect(count((c) => c.status === 'inactive')).toBeGreaterThan(50);
      expect(count((c) => c.status === 'locked' && c.lockedUntil! > now)).toBeGreaterThan(10);
      expect(count((c) => c.status === 'locked' && c.lockedUntil! < now)).toBeGreaterThan(10);
      const created = children.map((c) => c.createdAt.getTime());
      expect(Math.min(...created)).toBeGreaterThanOrEqual(now.getTime() - 730 * DAY);
      expect(Math.max(...created)).toBeLessThanOrEqual(now.getTime());
      expect(Math.max(...created) - Math.min(...created)).toBeGreaterThan(650 * DAY);
      const monthsCovered = new Set(children.map((c) => c.createdAt.toISOString().slice(0, 7)));
      expect(monthsCovered.size).toBeGreaterThanOrEqual(24);
      const recent = now.getTime() - 30 * DAY;
      expect(count((c) => c.lastLogin !== null && c.lastLogin.getTime() >= recent)).toBeGreaterThan(400);
      expect(count((c) => c.lastLogin !== null && c.lastLogin.getTime() < recent)).toBeGreaterThan(400);
      expect(count((c) => c.lastLogin === null)).toBeGreaterThan(80);
      expect(count((c) => c.lastLogin !== null && c.lastLogin < c.createdAt)).toBe(0);
      expect(new Set(children.map((c) => c.publicKey)).size).toBe(1600);
      for (const child of children.slice(0, 50)) {
        expect(child.id).toMatch(/^USR_[A-Za-z0-9]+$/);
        expect(child.publicKey).toMatch(/^APK_[A-Za-z0-9]+_[0-9]+$/);
        expect(child.email).toContain('@');
        // The key's digits are the registration time in ms: the bulk insert must not shift it.
        expect(child.publicKey.endsWith(`_${child.createdAt.getTime()}`)).toBe(true);
      }
    });

    it("a parent's counters count its whole organization", async () => {
      const parents = await database().prisma.account.findMany({ where: { type: 'parent' } });
      for (const parent of parents) {
        const sums = await database().prisma.account.aggregate({
          where: { parentId: parent.id },
          _sum: { signInCount: true, childSignupCount: true, providerBAuthCount: true },
        });
        expect(parent.childSignupCount).toBe(sums._sum.childSignupCount);
        expect(parent.signInCount).toBeGreaterThan(sums._sum.signInCount!);
        expect(parent.providerBAuthCount).toBe(sums._sum.providerBAuthCount);
      }
    });

    it('usage rows for the current month and the months before it', async () => {
      const usage = await database().prisma.monthlyUsage.findMany();
      const currentMonth = '2026-06-01';
      const organizations = await database().prisma.organization.findMany({ select: { parentId: true } });
      for (const { parentId } of organizations) {
        const months = usage
          .filter((u) => u.organizationId === parentId)
          .map((u) => u.month.toISOString().slice(0, 10));
        expect(months).toContain(currentMonth);
        expect(months).toContain('2026-05-01');
        expect(months.length).toBeGreaterThanOrEqual(12);
      }
    });

    it('sets every secret of decisions §7 to a recognisable value of at least 32 bytes', async () => {
      const orgs = await database().prisma.organization.findMany();
      for (const org of orgs) {
        for (const value of [org.jwtSecret, org.providerASsoClientSecret, org.encryptionKey, org.encryptionIv]) {
          expect(value).toMatch(new RegExp(`^${SECRET_MARKER}_`));
          expect(Buffer.byteLength(value!)).toBeGreaterThanOrEqual(32);
        }
      }
      const parents = await database().prisma.account.findMany({ where: { type: 'parent' } });
      for (const parent of parents) {
        for (const value of [parent.passwordHash, parent.emailVerificationToken, parent.passwordResetToken]) {
          expect(value).toMatch(new RegExp(`^${SECRET_MARKER}_`));
        }
      }
      expect(
        await database().prisma.account.count({ where: { passwordResetToken: { startsWith: SECRET_MARKER } } }),
      ).toBeGreaterThan(4);
    });
  });
});

describe('demo data on start', () => {
  it('is on by default in development only; SEED_DEMO_ON_START decides when set', () => {
    expect(loadConfig({}).seedDemoOnStart).toBe(true);
    expect(loadConfig({ NODE_ENV: 'development' }).seedDemoOnStart).toBe(true);
    expect(loadConfig({ NODE_ENV: 'production' }).seedDemoOnStart).toBe(false);
    expect(loadConfig({ NODE_ENV: 'test' }).seedDemoOnStart).toBe(false);
    expect(loadConfig({ NODE_ENV: 'production', SEED_DEMO_ON_START: 'true' }).seedDemoOnStart).toBe(true);
    expect(loadConfig({ NODE_ENV: 'development', SEED_DEMO_ON_START: 'false' }).seedDemoOnStart).toBe(false);
  });
});
