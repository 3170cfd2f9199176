import type { Viewer } from '../auth/authenticate.js';
import { analyseCredits, type CreditAnalysis } from '../domain/credit-analysis.js';
import { monthStart } from '../domain/dates.js';
import type { ServiceContext } from './context.js';

/** The parent's credit analysis (spec: GET /parent/credit-analysis, decisions §5). */
export async function getCreditAnalysis(viewer: Viewer, context: ServiceContext): Promise<CreditAnalysis> {
  const { organization } = viewer;
  const now = context.now();
  const totalChildAccounts = organization.childCount;
  const [usage, purchases] = await Promise.all([
    context.loaders.monthlyUsage.load(`${organization.parentId}|${monthStart(now).toISOString()}`),
    context.loaders.packagePurchasesByOrganization.load(organization.parentId),
  ]);
  return analyseCredits({
    creditBalance: organization.creditBalance,
    totalFreeUsers: organization.totalFreeUsers,
    totalChildAccounts,
    usage: usage ?? undefined,
    purchases,
    now,
  });
}
