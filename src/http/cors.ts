/*
 * The one CORS policy, applied by the edge to every answer and every preflight, whatever the path:
 * REST, both GraphQL transports, probes, metrics and the reference pages. No cookies are involved, so
 * credentials are never allowed.
 */

/** What browsers may send: the API's own headers and those GraphQL clients add (Apollo Client's). */
const ALLOWED_REQUEST_HEADERS =
  'Authorization, Content-Type, Accept, X-Public-Key, X-Request-Id, If-None-Match, ' +
  'apollographql-client-name, apollographql-client-version, apollo-require-preflight';

/** What scripts may read of an answer. */
const EXPOSED_HEADERS =
  'X-Request-Id, ETag, WWW-Authenticate, Allow, Retry-After, ' +
  'RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, RateLimit-Policy';

/** How long a browser may reuse a preflight's answer (Chromium caps it at two hours). */
const MAX_AGE_SECONDS = '7200';

export type CorsPolicy = {
  /** Headers for an answer to a request from `origin` (none when there is no Origin). */
  answer(origin: string | undefined): [string, string][];
  /** Headers for a preflight from `origin` to a path that takes `methods`. */
  preflight(origin: string | undefined, methods: string): [string, string][];
};

export function createCorsPolicy(origins: '*' | readonly string[]): CorsPolicy {
  const listed = origins === '*' ? undefined : new Set(origins);
  // With a list, the answer depends on Origin: caches must keep one copy per origin.
  const vary: [string, string][] = listed ? [['Vary', 'Origin']] : [];
  const allowed = (origin: string | undefined): origin is string =>
    origin !== undefined && (listed === undefined || listed.has(origin));
  const allowOrigin = (origin: string): [string, string] => ['Access-Control-Allow-Origin', listed ? origin : '*'];
  return {
    answer(origin) {
      if (!allowed(origin)) return vary;
      return [...vary, allowOrigin(origin), ['Access-Control-Expose-Headers', EXPOSED_HEADERS]];
    },
    preflight(origin, methods) {
      if (!allowed(origin)) return vary;
      return [
        ...vary,
        allowOrigin(origin),
        ['Access-Control-Allow-Methods', methods],
        ['Access-Control-Allow-Headers', ALLOWED_REQUEST_HEADERS],
        ['Access-Control-Max-Age', MAX_AGE_SECONDS],
      ];
    },
  };
}
