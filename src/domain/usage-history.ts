import { CREDIT_COSTS } from './catalogue.js';
import {
  operationUsage,
  totalCreditsUsed,
  type MonthlyUsageTotals,
  type OperationUsage,
  type PackagePurchase,
} from './credit-analysis.js';
import { monthStart } from './dates.js';

/** The longest history one request may ask for. */
export const MAX_HISTORY_MONTHS = 36;
export const DEFAULT_HISTORY_MONTHS = 12;

export type MonthUsage = {
  /** The first instant of the month (UTC). */
  month: Date;
  operationUsage: OperationUsage;
  /** The month's operations priced by decisions §5's formula. */
  creditsUsed: number;
  /** Billable users at the month's end (for this month: now). */
  billableUsers: number;
  /** billableUsers x 1 credit. */
  retentionCredits: number;
  /** Purchases made in the month, newest first. */
  purchases: PackagePurchase[];
  creditsPurchased: number;
};

/** The first instants of the last `months` calendar months (UTC), oldest first, this month last. */
export function historyMonths(now: Date, months: number): Date[] {
  return Array.from({ length: months }, (_, i) => monthStart(now, months - 1 - i));
}

/**
 * Month by month, oldest first. Billable users at a month's end are counted from today's data:
 * the children registered by then (children since removed are not known) less the free users of
 * the purchases made by then (today's quota less what later purchases added).
 */
export function usageHistory(input: {
  months: Date[];
  usage: (MonthlyUsageTotals | undefined)[];
  /** Children registered in each of `months` (same order). */
  registrations: number[];
  totalChildAccounts: number;
  totalFreeUsers: number;
  /** Every purchase, newest first. */
  purchases: PackagePurchase[];
  now: Date;
}): MonthUsage[] {
  const { months } = input;
  return months.map((month, i) => {
    const end = i + 1 < months.length ? months[i + 1]!.getTime() : input.now.getTime();
    const registeredLater = input.registrations.slice(i + 1).reduce((sum, n) => sum + n, 0);
    const freeAddedLater = input.purchases
      .filter((p) => p.purchaseDate.getTime() >= end)
      .reduce((sum, p) => sum + p.freeUsersAdded, 0);
    const billable = Math.max(0, input.totalChildAccounts - registeredLater - (input.totalFreeUsers - freeAddedLater));
    const purchases = input.purchases.filter(
      (p) => p.purchaseDate.getTime() >= month.getTime() && p.purchaseDate.getTime() < end,
    );
    const usage = operationUsage(input.usage[i]);
    return {
      month,
      operationUsage: usage,
      creditsUsed: totalCreditsUsed(usage),
      billableUsers: billable,
      retentionCredits: billable * CREDIT_COSTS.userRetention,
      purchases,
      creditsPurchased: purchases.reduce((sum, p) => sum + p.creditsAdded, 0),
    };
  });
}
