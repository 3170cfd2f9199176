import { describe, expect, it } from 'vitest';
import { forecastCredits } from '../../src/domain/forecast.js';
import { createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

const now = new Date('2026-06-11T06:00:00.000Z');
const DAY = 86_400_000;
const FORECAST = '{ creditAnalysis { forecast { lowAt criticalAt depletedAt dailyBurn basis } } }';
const month = (iso: string) => new Date(`${iso}T00:00:00.000Z`);

type ForecastAnswer = {
  lowAt: string | null;
  criticalAt: string | null;
  depletedAt: string | null;
  dailyBurn: number;
  basis: string;
};

describe(`credit forecast and usage history (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database, { now: () => now });

  const forecastOf = async (token: string) => {
    const { data, errors } = await server().graphql<{ creditAnalysis: { forecast: ForecastAnswer } }>(FORECAST, {
      token,
    });
    expect(errors).toBeUndefined();
    return data!.creditAnalysis.forecast;
  };

  it('forecast: the burn of the previous month and this month so far, projected to each threshold', async () => {
    const built = await createOrganization(database(), {
      purchases: [
        { type: 'STARTER', at: new Date('2026-01-10T00:00:00.000Z') },
        { type: 'GROWTH', at: new Date('2026-05-20T00:00:00.000Z') },
      ],
      organization: { creditBalance: 20_000 },
      usage: [
        { month: month('2026-05-01'), signIns: 4_000, childSignups: 100 },
        { month: month('2026-06-01'), signIns: 1_000, emailVerifications: 50 },
        // Older months do not count.
        { month: month('2026-04-01'), signIns: 900_000 },
      ],
    });
    const burn = (4_000 + 100 * 5 + 1_000 + 50 * 2) / (31 + 10.25); // no billable users
    const at = (threshold: number) =>
      new Date(now.getTime() + Math.round(((20_000 - threshold) / burn) * DAY)).toISOString();
    expect(await forecastOf(await tokenFor(built.parent, built, { now }))).toEqual({
      lowAt: at(65_000 * 0.2),
      criticalAt: at(65_000 * 0.1),
      depletedAt: at(0),
      dailyBurn: Math.round(burn * 100) / 100,
      basis: 'CURRENT_AND_PREVIOUS_MONTH',
    });
  });

  it('forecast: retention counts, a threshold reached is dated now, nothing consumed is null', async () => {
    // 3 children, 1 free user: 2 billable users burn 2 credits over June's 30 days.
    const low = await createOrganization(database(), {
      purchases: [{ type: 'STARTER', at: new Date('2026-01-10') }],
      organization: { creditBalance: 150, totalFreeUsers: 1 },
    });
    for (let i = 0; i < 3; i++) await createChild(database(), low.parent);
    const burn = 2 / 30;
    expect(await forecastOf(await tokenFor(low.parent, low, { now }))).toEqual({
      lowAt: now.toISOString(),
      criticalAt: now.toISOString(),
      depletedAt: new Date(now.getTime() + Math.round((150 / burn) * DAY)).toISOString(),
      dailyBurn: 0.07,
      basis: 'CURRENT_MONTH',
    });
    const idle = await createOrganization(database(), { purchases: [{ type: 'STARTER', at: new Date('2026-01-10') }] });
    expect(await forecastOf(await tokenFor(idle.parent, idle, { now }))).toEqual({
      lowAt: null,
      criticalAt: null,
      depletedAt: null,
      dailyBurn: 0,
      basis: 'NO_BURN',
    });
    const empty = await createOrganization(database(), {
      purchases: [],
      organization: { creditBalance: 0, totalFreeUsers: 0 },
    });
    expect(await forecastOf(await tokenFor(empty.parent, empty, { now }))).toEqual({
      lowAt: now.toISOString(),
      criticalAt: now.toISOString(),
      depletedAt: now.toISOString(),
      dailyBurn: 0,
      basis: 'NO_BURN',
    });
  });

  it('forecast: a purchase moves the dates out at once; the burn stays', async () => {
    const built = await createOrganization(database(), {
      purchases: [{ type: 'STARTER', at: new Date('2026-01-10') }],
      organization: { creditBalance: 5_000 },
      usage: [
        { month: month('2026-05-01'), signIns: 3_100 },
        { month: month('2026-06-01'), signIns: 1_025 },
      ],
    });
    const token = await tokenFor(built.parent, built, { now });
    const before = await forecastOf(token);
    expect(before.dailyBurn).toBe(100); // 4,125 credits over 41.25 days
    expect(before.depletedAt).toBe(new Date(now.getTime() + 50 * DAY).toISOString());
    const { stats } = server().app.deps.cache;
    const announced = stats.announcements;
    await database().prisma.$transaction([
      database().prisma.packagePurchase.create({
        data: {
          transactionId: `TXN_${built.parent.id}_2`,
          organizationId: built.parent.id,
          packageType: 'STARTER',
          purchasedAt: now,
          creditsAdded: 10_000,
          freeUsersAdded: 1_000,
          price: '10.00',
        },
      }),
      database().prisma.organization.update({
        where: { parentId: built.parent.id },
        data: { creditBalance: { increment: 10_000 }, totalFreeUsers: { increment: 1_000 } },
      }),
    ]);
    await server().app.deps.cache.caughtUp();
    expect(stats.announcements).toBeGreaterThan(announced);
    await expect
      .poll(async () => (await forecastOf(token)).depletedAt, { timeout: 3_000, interval: 10 })
      .toBe(new Date(now.getTime() + 150 * DAY).toISOString());
    const after = await forecastOf(token);
    expect(after.dailyBurn).toBe(100);
    // Low is 20 % of 20,000 purchased: 11,000 credits above it at 100 a day.
    expect(after.lowAt).toBe(new Date(now.getTime() + 110 * DAY).toISOString());
  });

  it('usage history: month by month, oldest first, with billable users at each month end and the purchases of each month', async () => {
    const built = await createOrganization(database(), {
      purchases: [{ type: 'STARTER', at: new Date('2026-04-03T12:00:00.000Z') }],
      // One free user before any purchase (a quota the purchases do not explain).
      organization: { totalFreeUsers: 1_001 },
      usage: [
        { month: month('2026-02-01'), signIns: 10 },
        { month: month('2026-06-01'), childSignups: 2, emailVerifications: 1 },
      ],
    });
    for (const at of ['2026-02-10', '2026-02-28', '2026-04-15', '2026-06-02', '2026-06-03', '2025-01-01']) {
      await createChild(database(), built.parent, { createdAt: new Date(`${at}T23:59:59.999Z`) });
    }
    const { data, errors } = await server().graphql<{ creditAnalysis: { usageHistory: Record<string, unknown>[] } }>(
      `{ creditAnalysis { usageHistory(months: 6) { month creditsUsed billableUsers retentionCredits creditsPurchased
          operationUsage { childSignups signIns emailVerifications socialSignIns { total } } purchases { packageType creditsAdded } } } }`,
      { token: await tokenFor(built.parent, built, { now }) },
    );
    expect(errors).toBeUndefined();
    const history = data!.creditAnalysis.usageHistory;
    expect(history.map((m) => m.month)).toEqual(
      ['2026-01', '2026-02', '2026-03', '2026-04', '2026-05', '2026-06'].map((m) => `${m}-01T00:00:00.000Z`),
    );
    expect(history.map((m) => m.creditsUsed)).toEqual([0, 10, 0, 0, 0, 12]);
    // Children at each month end: 1, 3, 3, 4, 4, 6; free users 1 until April's purchase, then 1,001.
    expect(history.map((m) => m.billableUsers)).toEqual([0, 2, 2, 0, 0, 0]);
    expect(history.map((m) => m.retentionCredits)).toEqual([0, 2, 2, 0, 0, 0]);
    expect(history.map((m) => m.creditsPurchased)).toEqual([0, 0, 0, 10_000, 0, 0]);
    expect(history[3]!.purchases).toEqual([{ packageType: 'STARTER', creditsAdded: 10_000 }]);
    expect(history[5]!.operationUsage).toEqual({
      childSignups: 2,
      signIns: 0,
      emailVerifications: 1,
      socialSignIns: { total: 0 },
    });
  });

  it('usage history: 12 months by default, at most 36, and a clear error beyond', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built, { now });
    const count = async (args: string) => {
      const { data, errors } = await server().graphql<{ creditAnalysis: { usageHistory: unknown[] } }>(
        `{ creditAnalysis { usageHistory${args} { month } } }`,
        { token },
      );
      return errors ? errors.map((e) => e.extensions?.code) : data!.creditAnalysis.usageHistory.length;
    };
    expect(await count('')).toBe(12);
    expect(await count('(months: 36)')).toBe(36);
    expect(await count('(months: 1)')).toBe(1);
    for (const bad of ['(months: 0)', '(months: 37)', '(months: -1)', '(months: 2147483647)'])
      expect(await count(bad)).toEqual(['INVALID_MONTHS']);
  });

  it('parent-only: a child, a public-key caller and another organization cannot read them', async () => {
    const built = await createOrganization(database(), { usage: [{ month: month('2026-06-01'), signIns: 777 }] });
    const child = await createChild(database(), built.parent);
    const other = await createOrganization(database());
    const query = '{ creditAnalysis { forecast { dailyBurn } usageHistory(months: 1) { creditsUsed } } }';
    const codes = async (options: { token?: string; publicKey?: string }) =>
      (await server().graphql(query, options)).errors?.map((e) => e.extensions?.code);
    expect(await codes({ token: await tokenFor(child, built, { now }) })).toEqual(['UNAUTHORIZED_ACCESS']);
    expect(await codes({ publicKey: built.parent.publicKey })).toEqual(['UNAUTHORIZED']);
    const others = await server().graphql<{ creditAnalysis: { usageHistory: { creditsUsed: number }[] } }>(query, {
      token: await tokenFor(other.parent, other, { now }),
    });
    expect(others.data!.creditAnalysis.usageHistory).toEqual([{ creditsUsed: 0 }]);
  });
});

describe('forecast rule', () => {
  const base = {
    creditBalance: 1_000,
    purchasedCredits: 10_000,
    previousMonthCredits: undefined,
    monthlyRetentionCredits: 0,
  };
  it('in the first hours of a month without a previous month, counts one day rather than extrapolating hours', () => {
    const early = new Date('2026-06-01T02:24:00.000Z'); // 0.1 day in
    expect(forecastCredits({ ...base, currentMonthCredits: 100, now: early }).dailyBurn).toBe(100);
  });
  it('with the previous month, the first days of a month keep its rate', () => {
    const early = new Date('2026-06-01T02:24:00.000Z');
    expect(
      forecastCredits({ ...base, currentMonthCredits: 0, previousMonthCredits: 3_100, now: early }).dailyBurn,
    ).toBe(99.68);
  });
  it('a date more than ten years away is null', () => {
    expect(forecastCredits({ ...base, creditBalance: 10_000_000, currentMonthCredits: 1, now }).depletedAt).toBeNull();
  });
});
