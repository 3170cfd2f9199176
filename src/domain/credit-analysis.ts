import { CREDIT_COSTS, creditAlerts, type CreditAlerts, type PackageType } from './catalogue.js';
import { daysInMonth, monthStart } from './dates.js';

export type MonthlyUsageTotals = {
  childSignups: number;
  signIns: number;
  emailVerifications: number;
  providerAAuths: number;
  providerBAuths: number;
  providerCAuths: number;
  providerDAuths: number;
};

export type PackagePurchase = {
  packageType: PackageType;
  purchaseDate: Date;
  creditsAdded: number;
  freeUsersAdded: number;
  /** Dollars. */
  price: number;
  transactionId: string;
};

export type OperationUsage = {
  childSignups: number;
  signIns: number;
  emailVerifications: number;
  socialSignIns: { providerA: number; providerB: number; providerC: number; providerD: number; total: number };
};

export type CreditAnalysis = {
  creditBalance: number;
  totalFreeUsers: number;
  totalChildAccounts: number;
  billableUsers: number;
  monthlyRetentionCredits: number;
  operationUsage: OperationUsage;
  totalCreditsUsed: number;
  projectedMonthlyUsage: number;
  alerts: CreditAlerts;
  packageHistory: PackagePurchase[];
};

const DAY_MS = 86_400_000;

/** decisions §1: max(0, totalChildAccounts - totalFreeUsers). */
export function billableUsers(totalChildAccounts: number, totalFreeUsers: number): number {
  return Math.max(0, totalChildAccounts - totalFreeUsers);
}

export function operationUsage(usage: MonthlyUsageTotals | undefined): OperationUsage {
  const u = usage ?? {
    childSignups: 0,
    signIns: 0,
    emailVerifications: 0,
    providerAAuths: 0,
    providerBAuths: 0,
    providerCAuths: 0,
    providerDAuths: 0,
  };
  return {
    childSignups: u.childSignups,
    signIns: u.signIns,
    emailVerifications: u.emailVerifications,
    socialSignIns: {
      providerA: u.providerAAuths,
      providerB: u.providerBAuths,
      providerC: u.providerCAuths,
      providerD: u.providerDAuths,
      total: u.providerAAuths + u.providerBAuths + u.providerCAuths + u.providerDAuths,
    },
  };
}

/** decisions §5: credits consumed by this month's operations. */
export function totalCreditsUsed(usage: OperationUsage): number {
  return (
    usage.childSignups * CREDIT_COSTS.childSignup +
    usage.signIns * CREDIT_COSTS.signIn +
    usage.emailVerifications * CREDIT_COSTS.emailVerification +
    usage.socialSignIns.total * CREDIT_COSTS.socialSignIn
  );
}

/**
 * decisions §5: round(used / elapsedDays x daysInMonth) + retention, with elapsedDays the
 * fractional days since the month began (UTC), at least 1.
 */
export function projectedMonthlyUsage(used: number, retentionCredits: number, now: Date): number {
  const start = monthStart(now);
  const elapsedDays = Math.max(1, (now.getTime() - start.getTime()) / DAY_MS);
  const days = daysInMonth(start.getUTCFullYear(), start.getUTCMonth());
  return Math.round((used / elapsedDays) * days) + retentionCredits;
}

export function analyseCredits(input: {
  creditBalance: number;
  totalFreeUsers: number;
  totalChildAccounts: number;
  usage: MonthlyUsageTotals | undefined;
  /** Newest first. */
  purchases: PackagePurchase[];
  now: Date;
}): CreditAnalysis {
  const billable = billableUsers(input.totalChildAccounts, input.totalFreeUsers);
  const retention = billable * CREDIT_COSTS.userRetention;
  const usage = operationUsage(input.usage);
  const used = totalCreditsUsed(usage);
  const purchased = input.purchases.reduce((sum, p) => sum + p.creditsAdded, 0);
  return {
    creditBalance: input.creditBalance,
    totalFreeUsers: input.totalFreeUsers,
    totalChildAccounts: input.totalChildAccounts,
    billableUsers: billable,
    monthlyRetentionCredits: retention,
    operationUsage: usage,
    totalCreditsUsed: used,
    projectedMonthlyUsage: projectedMonthlyUsage(used, retention, input.now),
    alerts: creditAlerts(input.creditBalance, purchased),
    packageHistory: input.purchases,
  };
}
