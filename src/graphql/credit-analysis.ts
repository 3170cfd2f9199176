import type {
  CreditAnalysis as CreditAnalysisValue,
  OperationUsage as OperationUsageValue,
} from '../domain/credit-analysis.js';
import type { CreditAlerts as CreditAlertsValue } from '../domain/catalogue.js';
import { requireParent, type ParentViewer } from '../auth/authorize.js';
import type { Forecast as ForecastValue } from '../domain/forecast.js';
import {
  DEFAULT_HISTORY_MONTHS,
  MAX_HISTORY_MONTHS,
  type MonthUsage as MonthUsageValue,
} from '../domain/usage-history.js';
import { getForecast, getUsageHistory } from '../services/credit-trends.js';
import type { ServiceContext } from '../services/context.js';
import { getCreditAnalysis } from '../services/get-credit-analysis.js';
import { PackagePurchase } from './account.js';
import { builder, viewerOf } from './builder.js';
import { DateTime } from './scalars.js';

const SocialSignIns = builder.objectRef<OperationUsageValue['socialSignIns']>('SocialSignIns').implement({
  description: 'OAuth sign-ins this month by provider (3 credits each).',
  fields: (t) => ({
    providerA: t.exposeInt('providerA', { description: 'providerA sign-ins.' }),
    providerB: t.exposeInt('providerB', { description: 'providerB sign-ins.' }),
    providerC: t.exposeInt('providerC', { description: 'providerC sign-ins.' }),
    providerD: t.exposeInt('providerD', { description: 'providerD sign-ins.' }),
    total: t.exposeInt('total', { description: 'The sum of the four providers.' }),
  }),
});

const OperationUsage = builder.objectRef<OperationUsageValue>('OperationUsage').implement({
  description: "The organization's usage in the current calendar month (UTC).",
  fields: (t) => ({
    childSignups: t.exposeInt('childSignups', { description: 'Child signups (5 credits each).' }),
    signIns: t.exposeInt('signIns', { description: 'Sign-ins (1 credit each).' }),
    emailVerifications: t.exposeInt('emailVerifications', { description: 'Email verifications (2 credits each).' }),
    socialSignIns: t.field({
      type: SocialSignIns,
      description: 'OAuth sign-ins by provider.',
      resolve: (u) => u.socialSignIns,
    }),
  }),
});

const CreditAlerts = builder.objectRef<CreditAlertsValue>('CreditAlerts').implement({
  description: 'Credit alert levels, relative to all credits ever purchased.',
  fields: (t) => ({
    low: t.exposeBoolean('low', { description: 'At most 20 % of purchased credits remain (also true when critical).' }),
    critical: t.exposeBoolean('critical', { description: 'At most 10 % remain: service interruption imminent.' }),
    depleted: t.exposeBoolean('depleted', {
      description: "No credits remain: the organization's children are refused; the parent keeps access.",
    }),
  }),
});

const ForecastBasis = builder.enumType('ForecastBasis', {
  description: 'What the burn rate of a forecast was measured over.',
  values: {
    CURRENT_AND_PREVIOUS_MONTH: { description: 'The whole previous calendar month (UTC) and this month so far.' },
    CURRENT_MONTH: {
      description: 'This month so far (at least one day): nothing was recorded for the previous month.',
    },
    NO_BURN: { description: 'Nothing is being consumed: no usage in the window and no billable users.' },
  } as const,
});

const Forecast = builder.objectRef<ForecastValue>('CreditForecast').implement({
  description:
    'When the balance reaches the alert thresholds and zero at the current burn rate. burn = credits used by operations over the ' +
    'previous month and this month so far (this month only, at least a day, without a record for the previous month) divided by ' +
    "the window's days, plus this month's retention credits over the days of this month. A threshold already reached is dated now; " +
    'null when nothing is consumed or the date is more than ten years away.',
  fields: (t) => ({
    lowAt: t.field({
      type: DateTime,
      nullable: true,
      description: 'When at most 20 % of purchased credits remain.',
      resolve: (f) => f.lowAt,
    }),
    criticalAt: t.field({
      type: DateTime,
      nullable: true,
      description: 'When at most 10 % of purchased credits remain.',
      resolve: (f) => f.criticalAt,
    }),
    depletedAt: t.field({
      type: DateTime,
      nullable: true,
      description: 'When no credits remain.',
      resolve: (f) => f.depletedAt,
    }),
    dailyBurn: t.exposeFloat('dailyBurn', { description: 'Credits consumed a day (two decimals).' }),
    basis: t.field({
      type: ForecastBasis,
      description: 'The window the burn rate was measured over.',
      resolve: (f) => f.basis,
    }),
  }),
});

const MonthUsage = builder.objectRef<MonthUsageValue>('MonthUsage').implement({
  description: "One calendar month (UTC) of the organization's usage.",
  fields: (t) => ({
    month: t.field({ type: DateTime, description: 'The first instant of the month (UTC).', resolve: (m) => m.month }),
    operationUsage: t.field({
      type: OperationUsage,
      description: "The month's operations.",
      resolve: (m) => m.operationUsage,
    }),
    creditsUsed: t.exposeInt('creditsUsed', {
      description: "The month's operations in credits (the same formula as totalCreditsUsed).",
    }),
    billableUsers: t.exposeInt('billableUsers', {
      description:
        "Billable users at the month's end (this month: now): children registered by then, less the free users of purchases made by then.",
    }),
    retentionCredits: t.exposeInt('retentionCredits', { description: 'billableUsers x 1 credit.' }),
    purchases: t.field({
      type: [PackagePurchase],
      description: 'Purchases made in the month, newest first.',
      resolve: (m) => m.purchases,
    }),
    creditsPurchased: t.exposeInt('creditsPurchased', { description: 'Credits added by those purchases.' }),
  }),
});

/** The analysis with whom it was made for and the services it was read with (a subscription's push brings its own). */
export type CreditAnalysisRoot = CreditAnalysisValue & { viewer: ParentViewer; services: ServiceContext };

export const CreditAnalysis = builder.objectRef<CreditAnalysisRoot>('CreditAnalysis').implement({
  description: "The parent's credit analysis.",
  fields: (t) => ({
    creditBalance: t.exposeInt('creditBalance', { description: 'Current available credits.' }),
    totalFreeUsers: t.exposeInt('totalFreeUsers', { description: 'Cumulative free-user quota from packages.' }),
    totalChildAccounts: t.exposeInt('totalChildAccounts', { description: 'Number of child accounts, any status.' }),
    billableUsers: t.exposeInt('billableUsers', {
      description: 'Users above the free tier: max(0, totalChildAccounts - totalFreeUsers).',
    }),
    monthlyRetentionCredits: t.exposeInt('monthlyRetentionCredits', {
      description: 'Monthly retention cost: billableUsers x 1 credit.',
    }),
    operationUsage: t.field({
      type: OperationUsage,
      description: "This month's usage by operation.",
      resolve: (a) => a.operationUsage,
    }),
    totalCreditsUsed: t.exposeInt('totalCreditsUsed', {
      description:
        'Credits consumed this month: childSignups x 5 + signIns x 1 + emailVerifications x 2 + socialSignIns x 3.',
    }),
    projectedMonthlyUsage: t.exposeInt('projectedMonthlyUsage', {
      description: "This month's usage extrapolated to the whole month, plus the retention credits.",
    }),
    alerts: t.field({ type: CreditAlerts, description: 'Credit alert levels.', resolve: (a) => a.alerts }),
    packageHistory: t.field({
      type: [PackagePurchase],
      description: 'Package purchases, newest first.',
      resolve: (a) => a.packageHistory,
    }),
    forecast: t.field({
      type: Forecast,
      description: 'When the balance reaches the low and critical thresholds and zero at the current burn rate.',
      resolve: (a) => getForecast(a.viewer, a, a.services),
    }),
    usageHistory: t.field({
      type: [MonthUsage],
      description: `The last \`months\` calendar months (UTC), oldest first, this month last (at most ${MAX_HISTORY_MONTHS}).`,
      args: {
        months: t.arg.int({ defaultValue: DEFAULT_HISTORY_MONTHS, description: `Months, 1 to ${MAX_HISTORY_MONTHS}.` }),
      },
      resolve: (a, args) => getUsageHistory(a.viewer, a, args.months ?? DEFAULT_HISTORY_MONTHS, a.services),
    }),
  }),
});

builder.queryField('creditAnalysis', (t) =>
  t.field({
    type: CreditAnalysis,
    description:
      "The parent's credit analysis: balance, usage, billable users, projection, alerts, purchases. Parent accounts only.",
    authScopes: { parent: true },
    resolve: async (_root, _args, context) => {
      const viewer = requireParent(await viewerOf(context, 'jwt'));
      return { ...(await getCreditAnalysis(viewer, context.services)), viewer, services: context.services };
    },
  }),
);
