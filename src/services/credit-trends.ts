import type { ParentViewer } from '../auth/authorize.js';
import { readRegistrations } from '../db/child-list.js';
import { totalCreditsUsed, operationUsage, type CreditAnalysis } from '../domain/credit-analysis.js';
import { monthStart } from '../domain/dates.js';
import { forecastCredits, type Forecast } from '../domain/forecast.js';
import { MAX_HISTORY_MONTHS, historyMonths, usageHistory, type MonthUsage } from '../domain/usage-history.js';
import { InvalidMonthsError } from '../errors.js';
import type { ServiceContext } from './context.js';

const usageKey = (organizationId: string, month: Date) => `${organizationId}|${month.toISOString()}`;

/** The forecast of an analysis just made for `viewer`'s organization (see `domain/forecast.ts`). */
export async function getForecast(
  viewer: ParentViewer,
  analysis: CreditAnalysis,
  context: ServiceContext,
): Promise<Forecast> {
  const now = context.now();
  const previous = await context.loaders.monthlyUsage.load(usageKey(viewer.organization.parentId, monthStart(now, 1)));
  return forecastCredits({
    creditBalance: analysis.creditBalance,
    purchasedCredits: analysis.packageHistory.reduce((sum, p) => sum + p.creditsAdded, 0),
    currentMonthCredits: analysis.totalCreditsUsed,
    previousMonthCredits: previous ? totalCreditsUsed(operationUsage(previous)) : undefined,
    monthlyRetentionCredits: analysis.monthlyRetentionCredits,
    now,
  });
}

/** Month by month over the last `months` months, oldest first (see `domain/usage-history.ts`). */
export async function getUsageHistory(
  viewer: ParentViewer,
  analysis: CreditAnalysis,
  months: number,
  context: ServiceContext,
): Promise<MonthUsage[]> {
  if (!Number.isSafeInteger(months) || months < 1 || months > MAX_HISTORY_MONTHS) throw new InvalidMonthsError();
  const parentId = viewer.organization.parentId;
  const now = context.now();
  const starts = historyMonths(now, months);
  const from = starts[0]!.toISOString();
  const [usage, registered] = await Promise.all([
    context.loaders.monthlyUsage.loadMany(starts.map((month) => usageKey(parentId, month))),
    readRegistrations(context.cache, parentId, from),
  ]);
  return usageHistory({
    months: starts,
    usage: usage.map((u) => {
      if (u instanceof Error) throw u;
      return u ?? undefined;
    }),
    registrations: starts.map((month) => registered[month.toISOString().slice(0, 10)] ?? 0),
    totalChildAccounts: analysis.totalChildAccounts,
    totalFreeUsers: analysis.totalFreeUsers,
    purchases: analysis.packageHistory,
    now,
  });
}
