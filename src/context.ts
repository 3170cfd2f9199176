import { randomUUID } from 'node:crypto';
import {
  authenticateForOrganization,
  authenticateJwt,
  type AuthDependencies,
  type Credentials,
  type Viewer,
} from './auth/authenticate.js';
import type { Config } from './config.js';
import type { Database } from './db/database.js';
import type { EntityCache } from './db/entity-cache.js';
import { createLoaders } from './loaders.js';
import type { ServiceContext } from './services/context.js';
import type { RetrievalCounter } from './services/retrieval-counter.js';
import type { Observed } from './rest/http.js';

/** What lives as long as the process: shared by every request. */
export type AppDependencies = {
  config: Config;
  database: Database;
  /** Accounts, organizations, signing keys, purchases and usage, invalidated by the database. */
  cache: EntityCache;
  retrievals: RetrievalCounter;
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
};

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFrom(header: string | null | undefined): string {
  return header && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

export function createRequestContext(
  deps: AppDependencies,
  credentials: Credentials,
  requestId: string,
  /** Where the caller, once authenticated, is noted for the request's log line. */
  observed?: Observed,
): RequestContext {
  const loaders = createLoaders(deps.database.prisma, deps.database.sql, deps.cache);
  // decisions §3 counts answers, not fields: a GraphQL operation that asks for the organization
  // under fifteen aliases is one retrieval.
  const counted = new Set<string>();
  const services: ServiceContext = {
    prisma: deps.database.prisma,
    sql: deps.database.sql,
    cache: deps.cache,
    loaders,
    now: deps.now,
    retrievals: {
      record: (organizationId, at) => {
        if (counted.has(organizationId)) return;
        counted.add(organizationId);
        deps.retrievals.record(organizationId, at);
      },
    },
    paginationSecret: deps.config.paginationSecret,
  };
  const auth: AuthDependencies = {
    loaders,
    cache: deps.cache,
    jwt: {
      issuer: deps.config.jwt.issuer,
      audience: deps.config.jwt.audience,
      maxAgeSeconds: deps.config.jwtMaxAgeSeconds,
      maxLifetimeSeconds: deps.config.jwtMaxLifetimeSeconds,
      maxTokenBytes: deps.config.limits.maxTokenBytes,
    },
    now: deps.now,
  };
  let jwt: Promise<Viewer> | undefined;
  let organization: Promise<Viewer> | undefined;
  const noted = (viewer: Viewer): Viewer => {
    if (observed) {
      observed.caller = viewer.kind;
      observed.organizationId = viewer.organization.parentId;
    }
    return viewer;
  };
  return {
    requestId,
    services,
    jwtViewer: () => (jwt ??= authenticateJwt(credentials, auth).then(noted)),
    organizationViewer: () => (organization ??= authenticateForOrganization(credentials, auth).then(noted)),
  };
}
