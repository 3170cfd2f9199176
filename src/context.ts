import {
  authenticateForOrganization,
  authenticateJwt,
  type AuthDependencies,
  type Credentials,
  type Viewer,
} from './auth/authenticate.js';
import { isParentByJwt, secretShownTo } from './auth/authorize.js';
import type { Config } from './config.js';
import type { Database } from './db/database.js';
import { ReadSet, type CacheLookups } from './db/read-set.js';
import type { EntityCache } from './db/entity-cache.js';
import type { ReadQuery } from './db/replicas.js';
import type { Searches } from './db/search-reads.js';
import type { LiveUpdates } from './live/live-updates.js';
import { createLoaders } from './db/loaders.js';
import type { ServiceContext } from './services/context.js';
import type { RetrievalCounter } from './services/retrieval-counter.js';

/** What lives as long as the process: shared by every request. */
export type AppDependencies = {
  config: Config;
  database: Database;
  /** Accounts, organizations, signing keys, purchases and usage, invalidated by the database. */
  cache: EntityCache;
  /** Reads that tolerate REPLICA_MAX_LAG_MS of staleness: a replica when one is usable, else the primary. */
  staleReads: ReadQuery;
  /** The child list's searches: bounded in time and in number (`db/search-reads.ts`). */
  searches: Searches;
  retrievals: RetrievalCounter;
  /** Open subscriptions (GraphQL over Server-Sent Events). */
  live?: LiveUpdates;
  now: () => Date;
};

/** One fresh context per request: the caller's credentials, the lazily verified viewer, new loaders. */
export type RequestContext = {
  requestId: string;
  services: ServiceContext;
  /** The JWT caller (profile and parent-only operations). */
  jwtViewer: () => Promise<Viewer>;
  /** The JWT caller, or else the X-Public-Key caller (organization details). */
  organizationViewer: () => Promise<Viewer>;
  credentials: Credentials;
  live: LiveUpdates | undefined;
  /** What this request read (through the cache or around it) and computed from the clock. */
  reads: ReadSet;
  /**
   * An answer that shows the caller's organization alone, held in the entity cache once for its
   * readers and once for its parent by JWT (shown the signing secret), and dropped with what it was
   * computed from. Served held, it records the caller and the retrieval as computing it did.
   */
  sharedAnswer: (name: string, compute: () => Promise<Buffer | undefined>) => Promise<SharedAnswer | undefined>;
  /** A new context for the same request, for a subscription's answers (its retrievals are not counted). */
  renew: () => RequestContext;
};

/** An organization's answer held for its readers (`RequestContext.sharedAnswer`). */
export type SharedAnswer = {
  readonly body: Buffer;
  readonly label: string | undefined;
  /** The body's entity tag, made the first time a revalidatable answer needs it. */
  etag?: string;
};

/** What the answer to a request turned out to be, beyond its status: for its log line and metrics. */
export type RequestRecord = {
  /** The error code answered (REST envelope, GraphQL refusal, or the first error of a GraphQL result). */
  code?: string;
  /** GraphQL: the root fields the operation selected (see `graphql/observe.ts`). */
  operation?: string;
  /** Who the request was authenticated as, once it was. */
  caller?: 'parent' | 'child' | 'publicKey';
  /** The organization (its parent's userID) the caller belongs to. */
  organizationId?: string;
  /** GraphQL: the operation was a stored one, named by its id. */
  persisted?: boolean;
  /** The verified caller's credential (`via:kind:account`), once verified: what budgets are kept by. */
  viewer?: string;
  /** GraphQL: a document sent with its APQ hash, registered once answered if the caller verified. */
  registration?: { id: string; document: string };
  /**
   * Set once the caller is a parent by JWT: whether an answer carries the signing secret (decisions §3),
   * so that it is sent `no-store`. A function, so that no log line can carry the secret.
   */
  carriesSecret?: (payload: string | Buffer) => boolean;
  /** The entity cache's lookups for this request, hits and misses (for its trace). */
  cacheLookups?: CacheLookups;
};

/** Who a viewer is, as registration budgets are keyed: how it signed in, as whom. */
function viewerKeyOf(viewer: Viewer): string {
  return `${viewer.via}:${viewer.kind}:${viewer.account.id}`;
}

/** What a request context is made from: the credentials as sent, the request id, and its record. */
export type RequestSource = {
  credentials: Credentials;
  requestId: string;
  record: RequestRecord;
};

/** The one context factory: REST and both GraphQL transports make their context here. */
export function createRequestContext(
  deps: AppDependencies,
  source: RequestSource,
  options: { countRetrievals?: boolean } = {},
): RequestContext {
  const { credentials, requestId, record } = source;
  const reads = new ReadSet((record.cacheLookups ??= { hits: 0, misses: 0 }));
  const cache = deps.cache.recording(reads);
  const loaders = createLoaders(deps.database.prisma, cache);
  // decisions §3 counts answers, not fields: a GraphQL operation that asks for the organization
  // under fifteen aliases is one retrieval.
  const counted = new Set<string>();
  // Read around the cache: no announcement would say that what was read changed.
  const untracked = (source: ReadQuery): ReadQuery => ({
    query: <T extends Record<string, unknown>>(text: string, params?: unknown[]) => {
      reads.untracked = true;
      return source.query<T>(text, params);
    },
  });
  const services: ServiceContext = {
    staleReads: untracked(deps.staleReads),
    searchesOf: (organizationId) => {
      const { stale, primary } = deps.searches.of(organizationId);
      return { stale: untracked(stale), primary };
    },
    cache,
    loaders,
    now: () => {
      // An answer computed from the clock holds only at this instant.
      reads.untracked = true;
      return deps.now();
    },
    retrievals: {
      record: (organizationId) => {
        if (options.countRetrievals === false || counted.has(organizationId)) return;
        counted.add(organizationId);
        // A revalidation answered 304 counts as a 200 does: it is an answer (decisions §3), and
        // browsers revalidate on their own, as often as the original API counted.
        deps.retrievals.record(organizationId, deps.now());
      },
    },
    paginationSecret: deps.config.paginationSecret,
  };
  const auth: AuthDependencies = {
    loaders,
    cache,
    jwt: {
      issuer: deps.config.jwt.issuer,
      audience: deps.config.jwt.audience,
      maxAgeSeconds: deps.config.jwtMaxAgeSeconds,
      maxLifetimeSeconds: deps.config.jwtMaxLifetimeSeconds,
      maxTokenBytes: deps.config.limits.maxTokenBytes,
    },
    now: deps.now,
  };
  // Each verified once, and recorded on the request's record.
  let jwt: Promise<Viewer> | undefined;
  let organization: Promise<Viewer> | undefined;
  const hasAuthorization = credentials.authorization !== undefined && credentials.authorization !== null;
  const noted = (viewer: Viewer): Viewer => {
    record.caller = viewer.kind;
    record.organizationId = viewer.organization.parentId;
    record.viewer = viewerKeyOf(viewer);
    const secret = secretShownTo(viewer);
    if (secret) record.carriesSecret = secret;
    return viewer;
  };
  const jwtViewer = () => (jwt ??= authenticateJwt(credentials, auth).then(noted));
  // With an Authorization header only the JWT is tried (decisions §3): the same viewer.
  const organizationViewer = () =>
    (organization ??= hasAuthorization ? jwtViewer() : authenticateForOrganization(credentials, auth).then(noted));
  const context: RequestContext = {
    requestId,
    services,
    jwtViewer,
    organizationViewer,
    credentials,
    live: deps.live,
    reads,
    sharedAnswer: async (name, compute) => {
      const computed = (body: Buffer | undefined): SharedAnswer | undefined =>
        body === undefined ? undefined : { body, label: record.operation };
      const viewer = await organizationViewer().catch(() => undefined);
      // Credentials that do not verify: the operation says why, and nothing is held.
      if (viewer === undefined || !deps.cache.live) return computed(await compute());
      const key = `answer:${viewer.organization.parentId}:${isParentByJwt(viewer) ? 'owner' : 'reader'}:${name}`;
      const kept = deps.cache.computed<SharedAnswer>(key);
      if (kept !== undefined) {
        record.operation = kept.label;
        services.retrievals.record(viewer.organization.parentId);
        return kept;
      }
      const answer = computed(await compute());
      if (answer !== undefined) deps.cache.keepComputed(key, answer, reads);
      return answer;
    },
    renew: renewal(deps, credentials, requestId),
  };
  return context;
}

/** `RequestContext.renew`, apart from the context so that a subscription keeps no request's loaders. */
function renewal(deps: AppDependencies, credentials: Credentials, requestId: string): () => RequestContext {
  return () => createRequestContext(deps, { credentials, requestId, record: {} }, { countRetrievals: false });
}
