import type { CacheReader } from '../db/entity-cache.js';
import type { ReadQuery } from '../db/replicas.js';
import type { SearchReads } from '../db/search-reads.js';
import type { Loaders } from '../db/loaders.js';

/** What every service needs for one request: the database, this request's loaders, the clock. */
export type ServiceContext = {
  /** Reads that tolerate bounded staleness (a replica when usable): the child list's uncached pages. */
  staleReads: ReadQuery;
  /** The reads of a search of an organization's children: each statement bounded in time and in number. */
  searchesOf: (organizationId: string) => SearchReads;
  /** The process's entity cache (the child list keeps its counts there), this request's reads recorded. */
  cache: CacheReader;
  loaders: Loaders;
  /** The time: an answer computed from it holds only at this instant. */
  now: () => Date;
  /** Counts an organization-details retrieval; once per request, however often it is asked. */
  retrievals: { record: (organizationId: string) => void };
  /** Key material for page tokens; when unset, each organization's signing secret is used. */
  paginationSecret: string | undefined;
};
