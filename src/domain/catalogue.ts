/** The credit catalogue: package prices and what each operation costs (api-spec, Limits). */

export type PackageType = 'STARTER' | 'GROWTH' | 'SCALE';

export type CreditPackage = {
  type: PackageType;
  /** Dollars, exact in cents. */
  priceCents: number;
  credits: number;
  freeUsers: number;
  bonusPercent: number;
};

export const PACKAGES: Readonly<Record<PackageType, CreditPackage>> = {
  STARTER: { type: 'STARTER', priceCents: 10_00, credits: 10_000, freeUsers: 1_000, bonusPercent: 0 },
  GROWTH: { type: 'GROWTH', priceCents: 50_00, credits: 55_000, freeUsers: 5_000, bonusPercent: 10 },
  SCALE: { type: 'SCALE', priceCents: 100_00, credits: 120_000, freeUsers: 15_000, bonusPercent: 20 },
};

export const PACKAGE_TYPES = Object.keys(PACKAGES) as PackageType[];

/** Credits per operation. */
export const CREDIT_COSTS = {
  childSignup: 5,
  signIn: 1,
  emailVerification: 2,
  /** Each of providerA, providerB, providerC, providerD. */
  socialSignIn: 3,
  /** Per billable user per month. */
  userRetention: 1,
} as const;

/** Alert thresholds in percent of all credits ever purchased (decisions §5). */
export const ALERT_THRESHOLD_PERCENT = { low: 20, critical: 10 } as const;

export type CreditAlerts = { low: boolean; critical: boolean; depleted: boolean };

/**
 * decisions §5: depleted = B <= 0; critical = B <= 10 % of P; low = B <= 20 % of P, with P the
 * credits ever added by purchases. With P = 0 all three equal `depleted`.
 */
export function creditAlerts(balance: number, purchasedCredits: number): CreditAlerts {
  const depleted = balance <= 0;
  if (purchasedCredits <= 0) return { low: depleted, critical: depleted, depleted };
  // Compared in integers (B * 100 <= P * percent) so that "exactly 10 %" is never lost to rounding.
  return {
    low: balance * 100 <= purchasedCredits * ALERT_THRESHOLD_PERCENT.low,
    critical: balance * 100 <= purchasedCredits * ALERT_THRESHOLD_PERCENT.critical,
    depleted,
  };
}

export type AlertLevel = 'healthy' | 'low' | 'critical' | 'depleted';

export function alertLevel(alerts: CreditAlerts): AlertLevel {
  if (alerts.depleted) return 'depleted';
  if (alerts.critical) return 'critical';
  if (alerts.low) return 'low';
  return 'healthy';
}
