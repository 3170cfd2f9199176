import { createHash } from 'node:crypto';
import { decodeJwt } from 'jose';
import { requireParent } from '../auth/authorize.js';
import { bearerToken, credentialKey } from '../auth/credentials.js';
import type { RequestContext } from '../context.js';
import { ApiError, isDatabaseUnavailable, ServiceUnavailableError, toApiError, UnauthorizedError } from '../errors.js';
import type { Concerns } from '../live/live-updates.js';
import { getCreditAnalysis } from '../services/get-credit-analysis.js';
import { getOrganizationDetails } from '../services/get-organization-details.js';
import { builder, viewerOf } from './builder.js';
import { CreditAnalysis, type CreditAnalysisRoot } from './credit-analysis.js';
import { Organization } from './organization.js';

/*
 * Live updates over SSE: each subscription answers at once, then after each change that alters its
 * answer, at most once per LIVE_MIN_INTERVAL_MS (`live/live-updates.ts`); an unchanged answer is not sent.
 */

/** A token's `exp` in milliseconds: the subscription ends then. Only a JWT caller may subscribe. */
function expiryOf(context: RequestContext): number {
  const authorization = context.credentials.authorization;
  if (!authorization) throw new UnauthorizedError('Subscriptions need an access token: they end when it expires.');
  const { exp } = decodeJwt(bearerToken(authorization, 64 * 1024));
  if (typeof exp !== 'number') throw new UnauthorizedError();
  return exp * 1000;
}

/**
 * A subscription's answers, read with a renewed context and shared by the organization's subscriptions
 * of the same kind and account; it keeps only the renewal and a digest of the last answer.
 */
function follow<T>(
  context: RequestContext,
  organizationId: string,
  kind: string,
  concerns: Concerns,
  read: (fresh: RequestContext) => Promise<T>,
  key: (value: T) => string,
) {
  const live = context.live;
  if (!live) throw new ServiceUnavailableError('Live updates are not available on this server.');
  const expiresAt = expiryOf(context);
  const credential = credentialKey(context.credentials.authorization ?? undefined, undefined) ?? organizationId;
  const renew = context.renew;
  let last: string | undefined;
  return live.subscribe<T | ApiError>(credential, { organizationId, concerns }, expiresAt, async () => {
    try {
      const { value, seen } = await live.shared(organizationId, kind, async () => {
        const value = await read(renew());
        return { value, seen: digest(key(value)) };
      });
      if (seen === last) return undefined;
      last = seen;
      return value;
    } catch (error) {
      if (error instanceof ApiError) return error;
      // A database that does not answer is said once (SERVICE_UNAVAILABLE), and the stream ends.
      if (isDatabaseUnavailable(error)) return toApiError(error);
      throw error;
    }
  });
}

/** A short stand-in for an answer's text: what a subscription compares its next answer with. */
const digest = (text: string) => createHash('sha256').update(text).digest('base64url');

const unwrap = <T>(payload: T | ApiError): T => {
  if (payload instanceof ApiError) throw payload;
  return payload;
};

/** What alters a credit analysis: the balance, purchases, usage, and children added or removed. */
const creditConcerns: Concerns = (change, organizationId) =>
  change.entity !== 'account' || change.stable || change.id === organizationId;

/** What alters organization details: its settings or its parent's identity, not its balances. */
const organizationConcerns: Concerns = (change, organizationId) =>
  change.stable && (change.entity === 'organization' || (change.entity === 'account' && change.id === organizationId));

builder.subscriptionType({
  description:
    'Live updates over Server-Sent Events (GraphQL over SSE): an answer at once, then one after each change that alters it.',
});

builder.subscriptionField('creditAnalysisChanged', (t) =>
  t.field({
    type: CreditAnalysis,
    description:
      "The parent's credit analysis, at once and again after each change that alters it (a sign-in, a purchase, a status change), at most once per LIVE_MIN_INTERVAL_MS. Ends when the token expires. Parent accounts only.",
    authScopes: { parent: true },
    subscribe: async (_root, _args, context) => {
      const viewer = requireParent(await viewerOf(context, 'jwt'));
      const organizationId = viewer.organization.parentId;
      return follow(
        context,
        organizationId,
        `credit|${viewer.account.id}`,
        creditConcerns,
        async (fresh): Promise<CreditAnalysisRoot> => {
          const current = requireParent(await viewerOf(fresh, 'jwt'));
          return { ...(await getCreditAnalysis(current, fresh.services)), viewer: current, services: fresh.services };
        },
        ({ viewer: _viewer, services: _services, ...analysis }) => JSON.stringify(analysis),
      );
    },
    resolve: (payload) => unwrap(payload as CreditAnalysisRoot | ApiError),
  }),
);

builder.subscriptionField('organizationChanged', (t) =>
  t.field({
    type: Organization,
    description:
      "The organization's details (a child gets its parent's), at once and again after each change to them, at most once per LIVE_MIN_INTERVAL_MS. A push is not a retrieval. Ends when the token expires. By token only.",
    authScopes: { authenticated: true },
    subscribe: async (_root, _args, context) => {
      const viewer = await viewerOf(context, 'jwt');
      const organizationId = viewer.organization.parentId;
      return follow(
        context,
        organizationId,
        `organization|${viewer.account.id}`,
        organizationConcerns,
        async (fresh) => getOrganizationDetails(await viewerOf(fresh, 'jwt'), fresh.services),
        (details) => JSON.stringify(details),
      );
    },
    resolve: (payload) => unwrap(payload as Awaited<ReturnType<typeof getOrganizationDetails>> | ApiError),
  }),
);
