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
 * in the instance, SEARCH_MAX_PER_ORGANIZATION for one organization, and they take at most
 * SEARCH_MAX_TIME_PERCENT of the wall clock. A statement past the bound, or one more than any of
 * these allows, is refused at once: 503 SERVICE_UNAVAILABLE with Retry-After. Nothing waits in a
 * queue.
 */

export type SearchBounds = {
  timeoutMs: number;
  maxConcurrent: number;
  maxPerOrganization: number;
  /** The share of the wall clock, in percent, that the instance's search statements may take (SEARCH_MAX_TIME_PERCENT). */
  maxTimePercent: number;
};

/**
 * The time share's budget holds at most its share of this much of the wall clock: what searches
 * may spend at once after a quiet while. Two seconds: at the default share, a count of every child
 * of a million (0.25-0.30 s) leaves the next search of the same admin admitted.
 */
const SHARE_WINDOW_MS = 2000;
/** The longest Retry-After a spent time share answers with. */
const MAX_RETRY_AFTER_SECONDS = 30;

/** When a refused search may be tried again. */
const RETRY_AFTER_SECONDS = 1;

export class SearchBusyError extends ServiceUnavailableError {
  constructor(message = 'Too many searches of this organization are running; try again shortly.') {
    super(message, RETRY_AFTER_SECONDS);
  }
}

export class SearchShareSpentError extends ServiceUnavailableError {
  constructor(retryAfterSeconds: number) {
    super('Searches have taken their share of this server\'s database time; try again shortly.', retryAfterSeconds);
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
  /**
   * The time share: milliseconds of statement time the instance's searches may still spend. It
   * fills at `maxTimePercent` of the wall clock, up to that share of SHARE_WINDOW_MS; each
   * statement's time is taken from it when it ends, and below zero new searches are refused
   * until it fills again. SEARCH_MAX_CONCURRENT bounds how many run at once; this bounds how much
   * of the time they run, so that parents searching one term after another still leave the
   * database to the others.
   */
  private budgetMs: number;
  private filledAt: number;

  constructor(
    private readonly bounds: SearchBounds,
    private readonly stale: ReadQuery,
    private readonly primary: Pick<SqlDriver, 'query'>,
    private readonly closing: BoundedReads[] = [],
    /** A monotonic clock in milliseconds (tests drive the share with their own). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.budgetMs = this.capacityMs;
    this.filledAt = this.now();
  }

  private get capacityMs(): number {
    return (SHARE_WINDOW_MS * this.bounds.maxTimePercent) / 100;
  }

  /** The budget as of now. */
  private fill(): number {
    const now = this.now();
    this.budgetMs = Math.min(this.capacityMs, this.budgetMs + ((now - this.filledAt) * this.bounds.maxTimePercent) / 100);
    this.filledAt = now;
    return this.budgetMs;
  }

  /** The reads of a search of `organizationId`'s children. */
  of(organizationId: string): SearchReads {
    // The time share admits a search, not each of its statements: once one of them ran, the
    // others finish it (each still counted against the share and the concurrency bounds).
    const search = { admitted: false };
    return {
      stale: { query: (text, params) => this.run(organizationId, search, () => this.stale.query(text, params)) },
      primary: { query: (text, params) => this.run(organizationId, search, () => this.primary.query(text, params)) },
    };
  }

  /** Searches running now, in the instance. */
  get inFlight(): number {
    return this.running;
  }

  private async run<T>(organizationId: string, search: { admitted: boolean }, statement: () => Promise<T>): Promise<T> {
    const mine = this.byOrganization.get(organizationId) ?? 0;
    if (this.running >= this.bounds.maxConcurrent || mine >= this.bounds.maxPerOrganization) {
      this.stats.refused += 1;
      throw new SearchBusyError(this.running >= this.bounds.maxConcurrent ? 'Too many searches are running on this server; try again shortly.' : undefined);
    }
    const shared = this.bounds.maxTimePercent < 100;
    if (shared && !search.admitted && this.fill() < 0) {
      this.stats.refused += 1;
      // When the budget is back above zero, at the rate it fills.
      const waitMs = (-this.budgetMs * 100) / this.bounds.maxTimePercent;
      throw new SearchShareSpentError(Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, Math.ceil(waitMs / 1000))));
    }
    search.admitted = true;
    this.running += 1;
    this.byOrganization.set(organizationId, mine + 1);
    const started = this.now();
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
      if (shared) {
        this.fill();
        this.budgetMs -= this.now() - started;
      }
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
