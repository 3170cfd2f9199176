import SchemaBuilder from '@pothos/core';
import ScopeAuthPlugin, { AuthScopeFailureType, type AuthFailure } from '@pothos/plugin-scope-auth';
import { isParentByJwt } from '../auth/authorize.js';
import type { RequestContext } from '../context.js';
import { UnauthorizedAccessError, UnauthorizedError } from '../errors.js';

/** An authentication error thrown while evaluating a scope wins over the generic refusal. */
function rethrowScopeError(failure: AuthFailure): void {
  if ('error' in failure && failure.error) throw failure.error;
  if (failure.kind === AuthScopeFailureType.AnyAuthScopes || failure.kind === AuthScopeFailureType.AllAuthScopes) {
    for (const child of failure.failures) rethrowScopeError(child);
  }
}

export const builder = new SchemaBuilder<{
  Context: RequestContext;
  Scalars: { DateTime: { Input: Date; Output: Date | string } };
  DefaultFieldNullability: false;
  AuthScopes: {
    /** A usable account (parent or child) signed in by JWT. */
    authenticated: boolean;
    parent: boolean;
    child: boolean;
    /** A JWT caller, or a public-key caller for a usable parent (organization details). */
    organizationReader: boolean;
    /** The parent itself, by JWT: the only caller that sees the signing secret. */
    parentViaJwt: boolean;
  };
}>({
  plugins: [ScopeAuthPlugin],
  defaultFieldNullability: false,
  scopeAuth: {
    treatErrorsAsUnauthorized: true,
    // A subscription's scopes are checked when it is made; each answer it pushes is read with the
    // caller verified again (graphql/subscriptions.ts), so its events need no check of their own.
    authorizeOnSubscribe: true,
    unauthorizedError: (_parent, _context, _info, result) => {
      rethrowScopeError(result.failure);
      return new UnauthorizedAccessError();
    },
    // Made once per request, when a field first asks. A request with an Authorization header is a
    // JWT caller's (decisions §3): verified here, its scopes are booleans, and every field's check
    // is then synchronous, with no promise or per-field cache. Otherwise, or when it does not
    // verify, each scope verifies the caller when first asked, and a failed verification is the
    // field's error. (Plain values: getters that decided each scope when read cost twice the young
    // generation's collection time of this version, measured with bench:alloc.)
    authScopes: async (context) => {
      const jwt = context.credentials.authorization == null ? undefined : await context.jwtViewer().catch(() => null);
      if (jwt) {
        const parent = isParentByJwt(jwt);
        // With an Authorization header the organization's viewer is the JWT's (decisions §3).
        return {
          authenticated: true,
          parent,
          child: jwt.kind === 'child',
          organizationReader: true,
          parentViaJwt: parent,
        };
      }
      return {
        authenticated: async () => Boolean(await context.jwtViewer()),
        parent: async () => isParentByJwt(await context.jwtViewer()),
        child: async () => (await context.jwtViewer()).kind === 'child',
        organizationReader: async () => Boolean(await context.organizationViewer()),
        parentViaJwt: async () => isParentByJwt(await context.organizationViewer()),
      };
    },
  },
});

/** Resolves the viewer a scope has already verified (memoized per request). */
export async function viewerOf(context: RequestContext, kind: 'jwt' | 'organization') {
  const viewer = kind === 'jwt' ? await context.jwtViewer() : await context.organizationViewer();
  if (!viewer) throw new UnauthorizedError();
  return viewer;
}
