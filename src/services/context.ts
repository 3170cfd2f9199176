import type { PrismaClient } from '../generated/prisma/client.js';
import type { Loaders } from '../loaders.js';
import type { RetrievalCounter } from './retrieval-counter.js';

/** What every service needs for one request: the database, this request's loaders, the clock. */
export type ServiceContext = {
  prisma: PrismaClient;
  loaders: Loaders;
  now: () => Date;
  retrievals: RetrievalCounter;
  /** Key material for page tokens; when unset, each organization's signing secret is used. */
  paginationSecret: string | undefined;
};
