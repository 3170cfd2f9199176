import { ServiceUnavailableError } from '../errors.js';
import type { BoundedReads } from './database.js';
import type { ReadQuery } from './replicas.js';
import type { SqlDriver } from './sql-driver.js';

/*
 * The child list's searches, held so that no organization can hold the database for the others
 * (`src/db/README.md`, "Searches"). A search matches a substring, which may walk every child of a
 * large parent; so each of its statements runs on connections of its own (never the pool that
 * answers sign-ins' profiles), under a time bound of its own (SEARCH_TIMEOUT_MS, PostgreSQL's
 * `statement_timeout` on those connections), and only so many run at once: SEARCH_MAX_CONCURRENT
 * in the instance, SEARCH_MAX_PER_ORGANIZATION for one organization. A statement past the bound,
 * or one more than either count allows, is refused at once: 503 SERVICE_UNAVAILABLE with
 * Retry-After. Nothing waits in a queue.
 */

export type SearchBounds = { timeoutMs: number; maxConcurrent: number; maxPerOrganization: number };

/** When a refused search may be tried again. */
const RETRY_AFTER_SECONDS = 1;

export class SearchBusyError extends ServiceUnavailableError {
  constructor(message = 'Too many searches of this organization are running; try again shortly.') {
    super(message, RETRY_AFTER_SECONDS);
  }
}

export class SearchTimeoutError extends ServiceUnavailableError {
  constructor() {
    super('The search took longer than this server allows; a longer search term or a date range narrows it.', RETRY_AFTER_SECONDS);
  }
}

/** The statements of one organization's search: where they read, each one counted and bounded. */
export type SearchReads = {
  /** Reads that tolerate bounded staleness (a replica when usable): the search's pages. */
  stale: ReadQuery;
  /** Reads on the primary: the search's counts, which the entity cache keeps. */
  primary: Pick<SqlDriver, 'query'>;
};

export class Searches {
  private running = 0;
  /** Searches running by organization; an organization with none has no entry. */
  private readonly byOrganization = new Map<string, number>();
  readonly stats = { refused: 0, timedOut: 0 };

  constructor(
    private readonly bounds: SearchBounds,
    private readonly stale: ReadQuery,
    private readonly primary: Pick<SqlDriver, 'query'>,
    private readonly closing: BoundedReads[] = [],
  ) {}

  /** The reads of a search of `organizationId`'s children. */
  of(organizationId: string): SearchReads {
    return {
      stale: { query: (text, params) => this.run(organizationId, () => this.stale.query(text, params)) },
      primary: { query: (text, params) => this.run(organizationId, () => this.primary.query(text, params)) },
    };
  }

  /** Searches running now, in the instance. */
  get inFlight(): number {
    return this.running;
  }

  private async run<T>(organizationId: string, statement: () => Promise<T>): Promise<T> {
    const mine = this.byOrganization.get(organizationId) ?? 0;
    if (this.running >= this.bounds.maxConcurrent || mine >= this.bounds.maxPerOrganization) {
      this.stats.refused += 1;
      throw new SearchBusyError(this.running >= this.bounds.maxConcurrent ? 'Too many searches are running on this server; try again shortly.' : undefined);
    }
    this.running += 1;
    this.byOrganization.set(organizationId, mine + 1);
    try {
      return await statement();
    } catch (error) {
      // Past the bound: PostgreSQL cancelled it (57014), or the client gave up on the embedded database.
      if (timedOut(error)) {
        this.stats.timedOut += 1;
        throw new SearchTimeoutError();
      }
      throw error;
    } finally {
      this.running -= 1;
      const left = (this.byOrganization.get(organizationId) ?? 1) - 1;
      if (left === 0) this.byOrganization.delete(organizationId);
      else this.byOrganization.set(organizationId, left);
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.closing.map((reads) => reads.close()));
  }
}

/** Whether a failed statement ran past its time bound (rather than finding the database gone). */
function timedOut(error: unknown): boolean {
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === '57014' || (typeof message === 'string' && /statement timeout|Query read timeout/i.test(message));
}
