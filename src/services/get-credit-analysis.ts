import type { ParentViewer } from '../auth/authorize.js';
import { analyseCredits, type CreditAnalysis } from '../domain/credit-analysis.js';
import { monthStart } from '../domain/dates.js';
import { UserNotFoundError } from '../errors.js';
import type { ServiceContext } from './context.js';

/** The parent's credit analysis (spec: GET /parent/credit-analysis, decisions §5). */
export async function getCreditAnalysis(viewer: ParentViewer, context: ServiceContext): Promise<CreditAnalysis> {
  const { organization } = viewer;
  const now = context.now();
  const [usage, purchases, balances, totalChildAccounts] = await Promise.all([
    context.loaders.monthlyUsage.load(`${organization.parentId}|${monthStart(now).toISOString()}`),
    context.loaders.packagePurchasesByOrganization.load(organization.parentId),
    context.loaders.balancesByParentId.load(organization.parentId),
    context.loaders.childCountByParentId.load(organization.parentId),
  ]);
  if (!balances) throw new UserNotFoundError('The organization no longer exists.');
  return analyseCredits({
    creditBalance: balances.creditBalance,
    totalFreeUsers: organization.totalFreeUsers,
    totalChildAccounts,
    usage: usage ?? undefined,
    purchases,
    now,
  });
}
