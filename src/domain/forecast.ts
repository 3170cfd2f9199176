import { ALERT_THRESHOLD_PERCENT } from './catalogue.js';
import { daysInMonth, monthStart } from './dates.js';

const DAY_MS = 86_400_000;

/** Dates further out than this are not forecast: the balance does not fall within any horizon that matters. */
export const FORECAST_HORIZON_DAYS = 3_653;

/** What the burn rate was measured over: last month and this one, this month alone (a new organization), or none. */
export type ForecastBasis = 'CURRENT_AND_PREVIOUS_MONTH' | 'CURRENT_MONTH' | 'NO_BURN';

export type Forecast = {
  lowAt: Date | null;
  criticalAt: Date | null;
  depletedAt: Date | null;
  /** Credits a day, to two decimals. */
  dailyBurn: number;
  basis: ForecastBasis;
};

/**
 * When the balance reaches the `low` and `critical` thresholds and zero at the current burn rate (the
 * README states the rule): operations' credits over the window plus this month's retention a day; a
 * threshold reached is dated now; null when the burn is zero or past ten years.
 */
export function forecastCredits(input: {
  creditBalance: number;
  purchasedCredits: number;
  /** Credits used by operations this month so far. */
  currentMonthCredits: number;
  /** Credits used by operations in the whole previous month; undefined when nothing was recorded. */
  previousMonthCredits: number | undefined;
  monthlyRetentionCredits: number;
  now: Date;
}): Forecast {
  const { now } = input;
  const start = monthStart(now);
  const elapsedDays = (now.getTime() - start.getTime()) / DAY_MS;
  const previousStart = monthStart(now, 1);
  const withPrevious = input.previousMonthCredits !== undefined;
  const windowDays = withPrevious
    ? daysInMonth(previousStart.getUTCFullYear(), previousStart.getUTCMonth()) + elapsedDays
    : Math.max(1, elapsedDays);
  const windowCredits = input.currentMonthCredits + (input.previousMonthCredits ?? 0);
  const burn =
    windowCredits / windowDays +
    input.monthlyRetentionCredits / daysInMonth(start.getUTCFullYear(), start.getUTCMonth());
  const basis: ForecastBasis = burn <= 0 ? 'NO_BURN' : withPrevious ? 'CURRENT_AND_PREVIOUS_MONTH' : 'CURRENT_MONTH';
  const at = (percent: number): Date | null => {
    const threshold = (input.purchasedCredits * percent) / 100;
    if (input.creditBalance <= threshold) return new Date(now.getTime());
    if (burn <= 0) return null;
    const days = (input.creditBalance - threshold) / burn;
    return days > FORECAST_HORIZON_DAYS ? null : new Date(now.getTime() + Math.round(days * DAY_MS));
  };
  return {
    lowAt: at(ALERT_THRESHOLD_PERCENT.low),
    criticalAt: at(ALERT_THRESHOLD_PERCENT.critical),
    depletedAt: at(0),
    dailyBurn: Math.round(burn * 100) / 100,
    basis,
  };
}
