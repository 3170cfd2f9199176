import type { RequestContext } from '../context.js';
import { requireParent } from '../auth/authorize.js';
import { getCreditAnalysis } from '../services/get-credit-analysis.js';
import { millis } from './http.js';

/** GET /parent/credit-analysis: the analysis itself as the body, no envelope. */
export async function creditAnalysis(context: RequestContext): Promise<unknown> {
  const analysis = await getCreditAnalysis(requireParent(await context.jwtViewer()), context.services);
  return {
    ...analysis,
    packageHistory: analysis.packageHistory.map((p) => ({ ...p, purchaseDate: millis(p.purchaseDate) })),
  };
}
