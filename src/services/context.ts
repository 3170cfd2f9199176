import type { SqlDriver } from '../db/database.js';
import type { EntityCache } from '../db/entity-cache.js';
import type { ReadQuery } from '../db/replicas.js';
import type { PrismaClient } from '../generated/prisma/client.js';
import type { Loaders } from '../loaders.js';
import type { RetrievalCounter } from './retrieval-counter.js';

/** What every service needs for one request: the database, this request's loaders, the clock. */
export type ServiceContext = {
  prisma: PrismaClient;
  /** Plain SQL for the child list, whose keyset and counting queries are hand-tuned. */
  sql: SqlDriver;
  /** Reads that tolerate bounded staleness (a replica when usable): the child list's uncached pages. */
  staleReads: ReadQuery;
  /** The process's entity cache (the child list keeps its counts there). */
  cache: EntityCache;
  loaders: Loaders;
  now: () => Date;
  /** Counts an organization-details retrieval; once per request, however often it is asked. */
  retrievals: Pick<RetrievalCounter, 'record'>;
  /** Key material for page tokens; when unset, each organization's signing secret is used. */
  paginationSecret: string | undefined;
};
