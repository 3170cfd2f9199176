import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PACKAGES, creditAlerts, alertLevel } from '../src/domain/catalogue.js';
import {
  analyseCredits,
  billableUsers,
  operationUsage,
  projectedMonthlyUsage,
  totalCreditsUsed,
} from '../src/domain/credit-analysis.js';
import { daysInMonth, isoTime, monthStart, parseDateBound, parseDateRange } from '../src/domain/dates.js';
import { decodePageToken, encodePageToken } from '../src/domain/pagination.js';
import { canonicalBase64url, isCanonicalBase64url } from '../src/domain/base64url.js';
import { InvalidDateFormatError, InvalidPaginationTokenError } from '../src/errors.js';

describe('catalogue', () => {
  it('matches the spec: prices, credits, free users', () => {
    expect(PACKAGES.STARTER).toMatchObject({ priceCents: 1000, credits: 10_000, freeUsers: 1_000, bonusPercent: 0 });
    expect(PACKAGES.GROWTH).toMatchObject({ priceCents: 5000, credits: 55_000, freeUsers: 5_000, bonusPercent: 10 });
    expect(PACKAGES.SCALE).toMatchObject({ priceCents: 10000, credits: 120_000, freeUsers: 15_000, bonusPercent: 20 });
  });
});

describe('credit alerts (decisions §5)', () => {
  it.each([
    // balance, purchased, low, critical, depleted
    [2001, 10_000, false, false, false],
    [2000, 10_000, true, false, false], // exactly 20 %
    [1001, 10_000, true, false, false],
    [1000, 10_000, true, true, false], // exactly 10 %
    [1, 10_000, true, true, false],
    [0, 10_000, true, true, true],
    [-5, 10_000, true, true, true],
    [11_000, 55_000, true, false, false], // 20 % of GROWTH, no float noise
    [5_500, 55_000, true, true, false],
    [24_000, 120_000, true, false, false],
    [12_000, 120_000, true, true, false],
    [12_001, 120_000, true, false, false],
    [100, 0, false, false, false], // no purchases: all equal depleted
    [0, 0, true, true, true],
    [-1, 0, true, true, true],
  ])('balance %i of %i purchased: low %s, critical %s, depleted %s', (balance, purchased, low, critical, depleted) => {
    expect(creditAlerts(balance, purchased)).toEqual({ low, critical, depleted });
  });

  it('names the level', () => {
    expect(alertLevel(creditAlerts(5000, 10_000))).toBe('healthy');
    expect(alertLevel(creditAlerts(1500, 10_000))).toBe('low');
    expect(alertLevel(creditAlerts(500, 10_000))).toBe('critical');
    expect(alertLevel(creditAlerts(0, 10_000))).toBe('depleted');
  });
});

describe('credit analysis', () => {
  const usage = {
    childSignups: 10,
    signIns: 100,
    emailVerifications: 7,
    providerAAuths: 3,
    providerBAuths: 2,
    providerCAuths: 1,
    providerDAuths: 4,
  };

  it('billable users never go below zero', () => {
    expect(billableUsers(1500, 1000)).toBe(500);
    expect(billableUsers(1000, 1000)).toBe(0);
    expect(billableUsers(10, 1000)).toBe(0);
  });

  it('totals credits with the catalogue prices', () => {
    const ops = operationUsage(usage);
    expect(ops.socialSignIns).toEqual({ providerA: 3, providerB: 2, providerC: 1, providerD: 4, total: 10 });
    expect(totalCreditsUsed(ops)).toBe(10 * 5 + 100 + 7 * 2 + 10 * 3);
    expect(totalCreditsUsed(operationUsage(undefined))).toBe(0);
  });

  it('projects over the month from fractional elapsed days, at least one', () => {
    // 15.5 days into a 30-day month: 155 / 15.5 x 30 = 300
    expect(projectedMonthlyUsage(155, 0, new Date('2026-06-16T12:00:00.000Z'))).toBe(300);
    // first hour of a month: elapsed counts as 1 day
    expect(projectedMonthlyUsage(10, 0, new Date('2026-07-01T00:30:00.000Z'))).toBe(310);
    expect(projectedMonthlyUsage(10, 5, new Date('2026-07-01T00:00:00.000Z'))).toBe(315);
    // last instant of February in a leap year: 29 days elapsed of 29
    expect(projectedMonthlyUsage(290, 0, new Date('2024-02-29T23:59:59.999Z'))).toBe(290);
    // February of a common year has 28 days: 2 days elapsed
    expect(projectedMonthlyUsage(20, 0, new Date('2026-02-03T00:00:00.000Z'))).toBe(280);
    // the start of the last day of a 31-day month: 30 days elapsed, 310 / 30 x 31 = 320.33
    expect(projectedMonthlyUsage(310, 0, new Date('2026-01-31T00:00:00.000Z'))).toBe(320);
    expect(projectedMonthlyUsage(0, 7, new Date('2026-01-15T00:00:00.000Z'))).toBe(7);
  });

  it('puts it together', () => {
    const purchases = [
      {
        packageType: 'GROWTH' as const,
        purchaseDate: new Date('2026-03-01'),
        creditsAdded: 55_000,
        freeUsersAdded: 5_000,
        price: 50,
        transactionId: 'TXN_2',
      },
      {
        packageType: 'STARTER' as const,
        purchaseDate: new Date('2026-01-01'),
        creditsAdded: 10_000,
        freeUsersAdded: 1_000,
        price: 10,
        transactionId: 'TXN_1',
      },
    ];
    const analysis = analyseCredits({
      creditBalance: 6_500,
      totalFreeUsers: 6_000,
      totalChildAccounts: 6_250,
      usage,
      purchases,
      now: new Date('2026-06-11T00:00:00.000Z'),
    });
    expect(analysis).toEqual({
      creditBalance: 6_500,
      totalFreeUsers: 6_000,
      totalChildAccounts: 6_250,
      billableUsers: 250,
      monthlyRetentionCredits: 250,
      operationUsage: operationUsage(usage),
      totalCreditsUsed: 194,
      projectedMonthlyUsage: Math.round((194 / 10) * 30) + 250,
      alerts: { low: true, critical: true, depleted: false },
      packageHistory: purchases,
    });
  });
});

describe('date bounds (decisions §4)', () => {
  it.each([
    ['2024-05-31', 'start', '2024-05-31T00:00:00.000Z'],
    ['2024-05-31', 'end', '2024-05-31T23:59:59.999Z'],
    ['2024-02-29', 'end', '2024-02-29T23:59:59.999Z'],
    ['2024-05-31T10:20:30', 'start', '2024-05-31T10:20:30.000Z'],
    ['2024-05-31T10:20:30.5Z', 'start', '2024-05-31T10:20:30.500Z'],
    ['2024-05-31T10:20:30+02:00', 'start', '2024-05-31T08:20:30.000Z'],
    ['2024-05-31T10:20-0130', 'start', '2024-05-31T11:50:00.000Z'],
    ['1717150000000', 'start', '2024-05-31T10:06:40.000Z'],
    ['0', 'end', '1970-01-01T00:00:00.000Z'],
    [' 2024-01-01 ', 'start', '2024-01-01T00:00:00.000Z'],
  ] as const)('%s as %s bound is %s', (raw, bound, iso) => {
    expect(parseDateBound('startDate', raw, bound).toISOString()).toBe(iso);
  });

  it.each([
    '2024-02-30',
    '2023-02-29',
    '2024-13-01',
    '2024-00-10',
    '2024-05-31T24:00:00',
    '2024-05-31T10:61',
    'yesterday',
    '',
    '31/05/2024',
    '1.5',
    '-100',
    '99999999999999999',
    '2024-5-1',
  ])('refuses %j with INVALID_DATE_FORMAT naming the parameter', (raw) => {
    expect(() => parseDateBound('endDate', raw, 'end')).toThrow(InvalidDateFormatError);
    expect(() => parseDateBound('endDate', raw, 'end')).toThrow(/^endDate/);
  });

  it('refuses a start after the end, allows equal bounds', () => {
    expect(() => parseDateRange('2024-06-02', '2024-06-01')).toThrow(/startDate is after endDate/);
    expect(parseDateRange('2024-06-01', '2024-06-01')).toEqual({
      from: new Date('2024-06-01T00:00:00.000Z'),
      to: new Date('2024-06-01T23:59:59.999Z'),
    });
  });

  it('knows month lengths and month starts', () => {
    expect(daysInMonth(2024, 1)).toBe(29);
    expect(daysInMonth(2023, 1)).toBe(28);
    expect(daysInMonth(2000, 1)).toBe(29);
    expect(daysInMonth(1900, 1)).toBe(28);
    expect(daysInMonth(2026, 11)).toBe(31);
    expect(monthStart(new Date('2026-12-31T23:59:59.999Z')).toISOString()).toBe('2026-12-01T00:00:00.000Z');
  });
});

describe('times as answered', () => {
  it('are written exactly as Date.prototype.toISOString writes them, at every instant', () => {
    const edges = [
      0, -1, 1, 86_399_999, 86_400_000, 951_782_400_000, 951_868_799_999, 4_107_542_400_000, -30_610_224_000_001,
      253_402_300_799_999, 253_402_300_800_000, -62_167_219_200_000, 8.64e15, -8.64e15,
    ];
    for (const ms of edges) expect(isoTime(ms)).toBe(new Date(ms).toISOString());
    fc.assert(
      fc.property(fc.integer({ min: -8.64e15, max: 8.64e15 }), (ms) => isoTime(ms) === new Date(ms).toISOString()),
      { numRuns: 20_000 },
    );
    // The years this API shows, more densely.
    fc.assert(
      fc.property(
        fc.integer({ min: Date.UTC(1999, 0, 1), max: Date.UTC(2101, 0, 1) }),
        (ms) => isoTime(ms) === new Date(ms).toISOString(),
      ),
      { numRuns: 20_000 },
    );
    expect(isoTime(null)).toBeNull();
    expect(() => isoTime(Number.NaN)).toThrow(RangeError);
  });
});

describe('page tokens (decisions §4)', () => {
  const position = { createdAt: new Date('2025-01-02T03:04:05.006Z'), id: 'USR_abc' };
  it('round-trip for the parent they were issued to', () => {
    const token = encodePageToken(position, 'USR_parent', 'k'.repeat(32));
    expect(decodePageToken(token, 'USR_parent', 'k'.repeat(32))).toEqual(position);
  });
  it('are refused for another parent, another key, or any change', () => {
    const token = encodePageToken(position, 'USR_parent', 'k'.repeat(32));
    expect(() => decodePageToken(token, 'USR_other', 'k'.repeat(32))).toThrow(InvalidPaginationTokenError);
    expect(() => decodePageToken(token, 'USR_parent', 'j'.repeat(32))).toThrow(InvalidPaginationTokenError);
    for (let i = 0; i < token.length; i++) {
      const changed = token.slice(0, i) + (token[i] === 'A' ? 'B' : 'A') + token.slice(i + 1);
      if (changed === token) continue;
      expect(() => decodePageToken(changed, 'USR_parent', 'k'.repeat(32))).toThrow(InvalidPaginationTokenError);
    }
  });
});

describe('base64url spellings', () => {
  it('a segment is canonical exactly when an encoder would write it so (decoded and encoded again)', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/.!'.split('');
    const segment = fc.oneof(
      fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes).toString('base64url')),
      fc.array(fc.constantFrom(...alphabet), { maxLength: 12 }).map((chars) => chars.join('')),
    );
    fc.assert(
      fc.property(
        segment,
        (text) =>
          isCanonicalBase64url(text) ===
          (text !== '' && /^[A-Za-z0-9_-]+$/.test(text) && canonicalBase64url(text) === text),
      ),
      { numRuns: 5000, seed: 51 },
    );
  });
});
