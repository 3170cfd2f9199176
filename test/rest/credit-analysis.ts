import { describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { expectError, rest, useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';
import { typeOf } from './user-profile.js';

const PATH = '/parent/credit-analysis';
const now = new Date('2026-04-16T00:00:00.000Z');

describe(`GET ${PATH} (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database, { now: () => now });

  it('the bare analysis object, every field with its type and value', async () => {
    const org = await createOrganization(database(), {
      purchases: [
        { type: 'GROWTH', at: new Date('2026-01-10T00:00:00.000Z') },
        { type: 'STARTER', at: new Date('2026-03-10T00:00:00.000Z') },
      ],
      organization: { creditBalance: 9_000, totalFreeUsers: 2 },
      usage: [
        {
          month: new Date('2026-04-01T00:00:00.000Z'),
          childSignups: 4,
          signIns: 100,
          emailVerifications: 10,
          providerAAuths: 5,
          providerBAuths: 1,
          providerCAuths: 0,
          providerDAuths: 2,
        },
        { month: new Date('2026-03-01T00:00:00.000Z'), childSignups: 999, signIns: 999 },
      ],
    });
    for (let i = 0; i < 5; i++) await createChild(database(), org.parent);
    const result = await rest(server(), PATH, { token: await tokenFor(org.parent, org, { now }) });
    expect(result.status).toBe(200);
    expect(result.headers.get('cache-control')).toBe('private, no-cache');
    const used = 4 * 5 + 100 + 10 * 2 + 8 * 3;
    expect(result.body).toEqual({
      creditBalance: 9000,
      totalFreeUsers: 2,
      totalChildAccounts: 5,
      billableUsers: 3,
      monthlyRetentionCredits: 3,
      operationUsage: {
        childSignups: 4,
        signIns: 100,
        emailVerifications: 10,
        socialSignIns: { providerA: 5, providerB: 1, providerC: 0, providerD: 2, total: 8 },
      },
      totalCreditsUsed: used,
      projectedMonthlyUsage: Math.round((used / 15) * 30) + 3,
      // 9,000 of 65,000 purchased: under 20 % (13,000), over 10 % (6,500)
      alerts: { low: true, critical: false, depleted: false },
      packageHistory: [
        {
          packageType: 'STARTER',
          purchaseDate: Date.parse('2026-03-10T00:00:00.000Z'),
          creditsAdded: 10000,
          freeUsersAdded: 1000,
          price: 10,
          transactionId: expect.stringMatching(/^TXN_/),
        },
        {
          packageType: 'GROWTH',
          purchaseDate: Date.parse('2026-01-10T00:00:00.000Z'),
          creditsAdded: 55000,
          freeUsersAdded: 5000,
          price: 50,
          transactionId: expect.stringMatching(/^TXN_/),
        },
      ],
    });
    expect(Object.keys(result.body)).toEqual([
      'creditBalance',
      'totalFreeUsers',
      'totalChildAccounts',
      'billableUsers',
      'monthlyRetentionCredits',
      'operationUsage',
      'totalCreditsUsed',
      'projectedMonthlyUsage',
      'alerts',
      'packageHistory',
    ]);
    for (const key of [
      'creditBalance',
      'totalFreeUsers',
      'totalChildAccounts',
      'billableUsers',
      'monthlyRetentionCredits',
      'totalCreditsUsed',
      'projectedMonthlyUsage',
    ]) {
      expect(typeOf(result.body[key])).toBe('integer');
    }
  });

  it('errors: no token 401 UNAUTHORIZED, a child 401 UNAUTHORIZED_ACCESS, a deleted account 404 USER_NOT_FOUND, a deleted parent token 401, an inactive one 403', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    expectError(await rest(server(), PATH), 401, 'UNAUTHORIZED');
    expectError(await rest(server(), PATH, { token: await tokenFor(child, org, { now }) }), 401, 'UNAUTHORIZED_ACCESS');
    expectError(await rest(server(), PATH, { publicKey: org.parent.publicKey }), 401, 'UNAUTHORIZED');
    const inactive = await createOrganization(database(), { parent: { status: 'inactive' } });
    expectError(
      await rest(server(), PATH, { token: await tokenFor(inactive.parent, inactive, { now }) }),
      403,
      'ACCOUNT_INACTIVE',
    );
    // A token, signed with a valid key, whose account no longer exists.
    const gone = await createChild(database(), org.parent);
    const goneToken = await tokenFor(gone, org, { now });
    await database().prisma.account.delete({ where: { id: gone.id } });
    expectError(await rest(server(), PATH, { token: goneToken }), 404, 'USER_NOT_FOUND');
    // With its parent the organization and its signing secret are gone: the token is no longer valid.
    const token = await tokenFor(org.parent, org, { now });
    expect((await rest(server(), PATH, { token })).status).toBe(200);
    const { stats } = server().app.deps.cache;
    const before = stats.announcements;
    await database().prisma.account.delete({ where: { id: org.parent.id } });
    // Once the deletion is announced (the event the cache acts on), the token stops working.
    await server().app.deps.cache.caughtUp();
    expect(stats.announcements).toBeGreaterThan(before);
    await expect
      .poll(async () => (await rest(server(), PATH, { token })).status, { timeout: 3000, interval: 0 })
      .toBe(401);
  });
});
