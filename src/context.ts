import {
  authenticateForOrganization,
  authenticateJwt,
  type AuthDependencies,
  type Credentials,
  type Viewer,
} from './auth/authenticate.js';
import { isParentByJwt, secretShownTo } from './auth/authorize.js';
import type { Config } from './config.js';
import type { Answer } from './db/answer-cache.js';
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
  /**
   * The JWT caller when `viewerKey` already found it verified, recorded as the operation's (as
   * `jwtViewer` records it); undefined otherwise. With an Authorization header it is also the
   * organization's viewer (decisions §3).
   */
  verifiedJwt: () => Viewer | undefined;
  /** The credentials as sent. */
  credentials: Credentials;
  live: LiveUpdates | undefined;
  /** What this request read (through the cache or around it) and computed from the clock. */
  reads: ReadSet;
  /** The organizations whose details this request answered (each counted once as a retrieval). */
  retrieved: ReadonlySet<string>;
  /**
   * Who the answer is for, when the credentials verify: the account (or public key's parent) and
   * how it signed in. Answers kept for reuse are kept under it. Not recorded on the request's record.
   */
  viewerKey: () => Promise<string | undefined>;
  /**
   * Who shares an answer that shows the caller's organization alone (its details as the caller may
   * see them), when the credentials verify (as `viewerKey` verifies them): the parent itself by
   * JWT, shown the signing secret, or else every other reader of that organization (its children,
   * the parent by public key), shown it masked. Undefined when the credentials do not verify.
   * Never equal to a viewer's key.
   */
  organizationAudience: () => Promise<string | undefined>;
  /**
   * What serving a kept answer does beside sending it, as the operation that computed it did: the
   * viewer recorded, the label recorded, the retrievals it shows counted.
   */
  replay: (answer: Answer, record: RequestRecord) => Promise<void>;
  /**
   * A new context for the same request (new loaders, the caller verified again): what a
   * subscription reads each answer with. Its retrievals are not counted (a push is not one).
   */
  renew: () => RequestContext;
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
   * Set once the caller is verified as a parent by JWT, the one caller shown its organization's
   * signing secret (decisions §3): whether an answer's bytes carry that secret. The edge sends such
   * an answer `no-store`, with no ETag (`Exchange.send`). A function, so that no log line or
   * serialised record can carry the secret itself.
   */
  carriesSecret?: (payload: string | Buffer) => boolean;
  /** The entity cache's lookups for this request, hits and misses (for its trace). */
  cacheLookups?: CacheLookups;
};

/** Who a viewer is, as kept answers and registration budgets are keyed: how it signed in, as whom. */
function viewerKeyOf(viewer: Viewer): string {
  return `${viewer.via}:${viewer.kind}:${viewer.account.id}`;
}

/** The readers an answer showing the organization alone is kept for (`RequestContext.organizationAudience`). */
function audienceOf(viewer: Viewer): string {
  return `organization:${viewer.organization.parentId}:${isParentByJwt(viewer) ? 'owner' : 'reader'}`;
}

/** What a request context is made from: the credentials as sent, the request id, and its record. */
export type RequestSource = {
  credentials: Credentials;
  requestId: string;
  record: RequestRecord;
};

/** The one context factory: REST and both GraphQL doors make their context here. */
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
      const now = deps.now();
      reads.instant(now.getTime());
      return now;
    },
    clock: () => ({ now: deps.now(), holdsUntil: reads.clock() }),
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
  // Each verified once; recorded on the request's record when an operation asks for it (not when
  // only a kept answer's key is looked for, so that the log says what the operation did).
  let jwt: Promise<Viewer> | undefined;
  let organization: Promise<Viewer> | undefined;
  let jwtAsked: Promise<Viewer> | undefined;
  let organizationAsked: Promise<Viewer> | undefined;
  // The caller once `viewerKey` found it verified, for what is decided without waiting again
  // (`verifiedJwt`), taken from the handler `viewerKey` has anyway.
  let keyed: Viewer | undefined;
  const hasAuthorization = credentials.authorization !== undefined && credentials.authorization !== null;
  const jwtCaller = () => (jwt ??= authenticateJwt(credentials, auth));
  // With an Authorization header only the JWT is tried (decisions §3): the same viewer.
  const organizationCaller = () =>
    (organization ??= hasAuthorization ? jwtCaller() : authenticateForOrganization(credentials, auth));
  // The verified caller, named as `name` names it (and remembered for `verifiedJwt`); undefined when it does
  // not verify.
  const keyedAs = (name: (viewer: Viewer) => string): Promise<string | undefined> =>
    organizationCaller().then(
      (viewer) => name((keyed = viewer)),
      () => undefined,
    );
  const noted = (viewer: Viewer): Viewer => {
    record.caller = viewer.kind;
    record.organizationId = viewer.organization.parentId;
    record.viewer = viewerKeyOf(viewer);
    const secret = secretShownTo(viewer);
    if (secret) record.carriesSecret = secret;
    return viewer;
  };
  const context: RequestContext = {
    requestId,
    services,
    jwtViewer: () => (jwtAsked ??= jwtCaller().then(noted)),
    organizationViewer: () => (organizationAsked ??= organizationCaller().then(noted)),
    // Without an Authorization header the caller found is the public key's, not a JWT's.
    verifiedJwt: () => (hasAuthorization && keyed ? noted(keyed) : undefined),
    credentials,
    live: deps.live,
    reads,
    retrieved: counted,
    viewerKey: () => keyedAs(viewerKeyOf),
    organizationAudience: () => keyedAs(audienceOf),
    replay: async (answer, into) => {
      await context.organizationViewer();
      into.operation = answer.label;
      for (const organizationId of answer.retrievals) services.retrievals.record(organizationId);
    },
    renew: renewal(deps, credentials, requestId),
  };
  return context;
}

/**
 * `RequestContext.renew`, made apart from the context so that it holds only what a new context is
 * made from: a subscription keeps it for its whole life, and must not keep the request's loaders.
 */
function renewal(deps: AppDependencies, credentials: Credentials, requestId: string): () => RequestContext {
  return () => createRequestContext(deps, { credentials, requestId, record: {} }, { countRetrievals: false });
}
