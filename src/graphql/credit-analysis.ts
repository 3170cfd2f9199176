import type { CreditAnalysis as CreditAnalysisValue, OperationUsage as OperationUsageValue } from '../domain/credit-analysis.js';
import type { CreditAlerts as CreditAlertsValue } from '../domain/catalogue.js';
import { getCreditAnalysis } from '../services/get-credit-analysis.js';
import { PackagePurchase } from './account.js';
import { builder, viewerOf } from './builder.js';

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
    socialSignIns: t.field({ type: SocialSignIns, description: 'OAuth sign-ins by provider.', resolve: (u) => u.socialSignIns }),
  }),
});

const CreditAlerts = builder.objectRef<CreditAlertsValue>('CreditAlerts').implement({
  description: 'Credit alert levels, relative to all credits ever purchased.',
  fields: (t) => ({
    low: t.exposeBoolean('low', { description: 'At most 20 % of purchased credits remain (also true when critical).' }),
    critical: t.exposeBoolean('critical', { description: 'At most 10 % remain: service interruption imminent.' }),
    depleted: t.exposeBoolean('depleted', { description: "No credits remain: the organization's children are refused; the parent keeps access." }),
  }),
});

const CreditAnalysis = builder.objectRef<CreditAnalysisValue>('CreditAnalysis').implement({
  description: "The parent's credit analysis.",
  fields: (t) => ({
    creditBalance: t.exposeInt('creditBalance', { description: 'Current available credits.' }),
    totalFreeUsers: t.exposeInt('totalFreeUsers', { description: 'Cumulative free-user quota from packages.' }),
    totalChildAccounts: t.exposeInt('totalChildAccounts', { description: 'Number of child accounts, any status.' }),
    billableUsers: t.exposeInt('billableUsers', { description: 'Users above the free tier: max(0, totalChildAccounts - totalFreeUsers).' }),
    monthlyRetentionCredits: t.exposeInt('monthlyRetentionCredits', { description: 'Monthly retention cost: billableUsers x 1 credit.' }),
    operationUsage: t.field({ type: OperationUsage, description: "This month's usage by operation.", resolve: (a) => a.operationUsage }),
    totalCreditsUsed: t.exposeInt('totalCreditsUsed', { description: 'Credits consumed this month: childSignups x 5 + signIns x 1 + emailVerifications x 2 + socialSignIns x 3.' }),
    projectedMonthlyUsage: t.exposeInt('projectedMonthlyUsage', { description: "This month's usage extrapolated to the whole month, plus the retention credits." }),
    alerts: t.field({ type: CreditAlerts, description: 'Credit alert levels.', resolve: (a) => a.alerts }),
    packageHistory: t.field({ type: [PackagePurchase], description: 'Package purchases, newest first.', resolve: (a) => a.packageHistory }),
  }),
});

builder.queryField('creditAnalysis', (t) =>
  t.field({
    type: CreditAnalysis,
    description: "The parent's credit analysis: balance, usage, billable users, projection, alerts, purchases. Parent accounts only.",
    authScopes: { parent: true },
    resolve: async (_root, _args, context) => getCreditAnalysis(await viewerOf(context, 'jwt'), context.services),
  }),
);
