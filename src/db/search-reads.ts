import { ApiError, ServiceUnavailableError } from '../errors.js';
import type { BoundedReads } from './database.js';
import type { ReadQuery } from './replicas.js';
import type { SqlDriver } from './sql-driver.js';

/*
 * The child list's searches, bounded so that no organization holds the database for the others
 * (`src/db/README.md`, "Searches"): connections of their own, a time bound, a few statements at a
 * time, and an equal part of the wall clock for each organization searching. One over its share is
 * told 429 SEARCH_BUSY; one searching alone waits for its part. Only slots that several fill is 503.
 */

export type SearchBounds = {
  timeoutMs: number;
  maxConcurrent: number;
  maxPerOrganization: number;
  /** The share of the wall clock, in percent, the instance's search statements may take. */
  maxTimePercent: number;
};

/** An organization's part holds at most its share of this window: what it may spend at once after a quiet while. */
const SHARE_WINDOW_MS = 10_000;
/** The longest a search that has spent its organization's part waits for it; then it runs. */
const MAX_DELAY_MS = 10_000;
/** The longest Retry-After a spent part answers with. */
const MAX_RETRY_AFTER_SECONDS = 30;
/** The organizations the share follows at once; past them, new searchers find the instance full. */
const MAX_ORGANIZATIONS = 10_000;

const CLOSED = 'The server is shutting down; try again shortly.';
const RETRY_AFTER_SECONDS = 1;

/** One organization over its own share of the searches: its concurrency or its part of the time (429). */
export class SearchBusyError extends ApiError {
  constructor(message: string, retryAfterSeconds = RETRY_AFTER_SECONDS) {
    super('SEARCH_BUSY', 429, message, retryAfterSeconds);
  }
}

/** The instance's search slots, taken by several organizations together (503). */
export class SearchesFullError extends ServiceUnavailableError {
  constructor(message = 'Too many searches are running on this server; try again shortly.') {
    super(message, RETRY_AFTER_SECONDS);
  }
}

export class SearchTimeoutError extends ServiceUnavailableError {
  constructor() {
    super(
      'The search took longer than this server allows; a longer search term or a date range narrows it.',
      RETRY_AFTER_SECONDS,
    );
  }
}

/** The statements of one organization's search: where they read, each one counted and bounded. */
export type SearchReads = {
  /** Reads that tolerate bounded staleness (a replica when usable): the search's pages. */
  stale: ReadQuery;
  /** Reads on the primary: the search's counts, which the entity cache keeps. */
  primary: Pick<SqlDriver, 'query'>;
};

/** An organization that searches, or has spent of its part lately. */
type Tenant = {
  /** Milliseconds of statement time it may still spend; below zero it has spent its part. */
  budgetMs: number;
  filledAt: number;
  /** Its statements running or waiting (a slot, or its part of the time). */
  pending: number;
};

type Waiter = { tenant: Tenant; begun: boolean; start: () => void; refuse: (error: Error) => void };

export class Searches {
  private running = 0;
  private readonly tenants = new Map<string, Tenant>();
  private readonly waiting: Waiter[] = [];
  private readonly timers = new Map<ReturnType<typeof setTimeout>, (error: Error) => void>();
  readonly stats = { refused: 0, timedOut: 0, delayed: 0 };
  private closed = false;

  constructor(
    private readonly bounds: SearchBounds,
    private readonly stale: ReadQuery,
    private readonly primary: Pick<SqlDriver, 'query'>,
    private readonly closing: BoundedReads[] = [],
    /** A monotonic clock in milliseconds (tests drive the share with their own, and fake timers). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  private get shared(): boolean {
    return this.bounds.maxTimePercent < 100;
  }

  /** The instance's share of the wall clock, in milliseconds a millisecond. */
  private get rate(): number {
    return this.bounds.maxTimePercent / 100;
  }

  /** Every tenant's part as of now; `charged` pays `spentMs`, and a whole, idle one is forgotten. */
  private fill(charged?: Tenant, spentMs = 0): void {
    const now = this.now();
    const rate = this.rate / Math.max(1, this.tenants.size);
    const capacity = SHARE_WINDOW_MS * this.rate;
    for (const [organizationId, tenant] of this.tenants) {
      tenant.budgetMs = Math.min(capacity, tenant.budgetMs + (now - tenant.filledAt) * rate);
      if (tenant === charged) tenant.budgetMs -= spentMs;
      tenant.filledAt = now;
      if (tenant.pending === 0 && tenant.budgetMs >= capacity) this.tenants.delete(organizationId);
    }
  }

  /** How long until `tenant`'s part is back above zero, at the rate it fills now. */
  private refillMs(tenant: Tenant): number {
    return (-tenant.budgetMs * Math.max(1, this.tenants.size)) / this.rate;
  }

  /** The reads of a search of `organizationId`'s children. */
  of(organizationId: string): SearchReads {
    // A search is admitted once: its first statement; the others finish it.
    const search = { tenant: undefined as Tenant | undefined };
    return {
      stale: { query: (text, params) => this.run(organizationId, search, () => this.stale.query(text, params)) },
      primary: { query: (text, params) => this.run(organizationId, search, () => this.primary.query(text, params)) },
    };
  }

  get inFlight(): number {
    return this.running;
  }

  private async run<T>(
    organizationId: string,
    search: { tenant: Tenant | undefined },
    statement: () => Promise<T>,
  ): Promise<T> {
    const begun = search.tenant !== undefined;
    // Counted as pending from here (`admit` counts a new search's first statement itself); a
    // begun search whose part was whole between its statements was forgotten, and is followed again.
    if (search.tenant) {
      const followed = this.tenants.get(organizationId);
      if (followed) search.tenant = followed;
      else this.tenants.set(organizationId, search.tenant);
      search.tenant.pending += 1;
    }
    const tenant = search.tenant ?? (await this.admit(organizationId));
    search.tenant = tenant;
    let started: number | undefined;
    try {
      await this.slot(tenant, begun);
      started = this.now();
      return await statement();
    } catch (error) {
      // Past the bound: PostgreSQL cancelled it (57014), or the client gave up on the embedded database.
      if (timedOut(error)) {
        this.stats.timedOut += 1;
        throw new SearchTimeoutError();
      }
      throw error;
    } finally {
      tenant.pending -= 1;
      if (started !== undefined) {
        if (this.shared) this.fill(tenant, this.now() - started);
        this.release();
      }
    }
  }

  /** A new search: refused over the organization's share, delayed when it searches alone over its part. */
  private async admit(organizationId: string): Promise<Tenant> {
    if (this.closed) throw new ServiceUnavailableError(CLOSED, RETRY_AFTER_SECONDS);
    this.fill();
    let tenant = this.tenants.get(organizationId);
    if (!tenant) {
      if (this.tenants.size >= MAX_ORGANIZATIONS) throw this.refused(new SearchesFullError());
      tenant = { budgetMs: SHARE_WINDOW_MS * this.rate, filledAt: this.now(), pending: 0 };
      this.tenants.set(organizationId, tenant);
    }
    if (tenant.pending >= this.bounds.maxPerOrganization) {
      throw this.refused(
        new SearchBusyError('This organization runs as many searches as it may at once; try again shortly.'),
      );
    }
    if (this.shared && tenant.budgetMs < 0) {
      const waitMs = this.refillMs(tenant);
      if (tenant.pending > 0) {
        const seconds = Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, Math.ceil(waitMs / 1000)));
        throw this.refused(
          new SearchBusyError(
            `This organization's searches have taken their share of this server's database time; try again in ${seconds} s.`,
            seconds,
          ),
        );
      }
      // One at a time: it waits for its part instead, holding the organization's place meanwhile.
      this.stats.delayed += 1;
      tenant.pending += 1;
      try {
        await this.wait(Math.min(waitMs, MAX_DELAY_MS));
      } catch (error) {
        tenant.pending -= 1;
        throw error;
      }
      return tenant;
    }
    tenant.pending += 1;
    return tenant;
  }

  /** A slot for a statement: at once when one is free and nobody waits, else when `release` hands it one. */
  private slot(tenant: Tenant, begun: boolean): Promise<void> {
    if (this.closed) return Promise.reject(new ServiceUnavailableError(CLOSED, RETRY_AFTER_SECONDS));
    if (this.running < this.bounds.maxConcurrent && this.waiting.length === 0) {
      this.running += 1;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        tenant,
        begun,
        start: () => {
          this.forget(timer);
          resolve();
        },
        refuse: reject,
      };
      // Slots taken this long by others: the instance is full, not this organization.
      const timer = this.timer(
        2 * this.bounds.timeoutMs,
        () => {
          this.waiting.splice(this.waiting.indexOf(waiter), 1);
          reject(this.refused(new SearchesFullError()));
        },
        reject,
      );
      this.waiting.push(waiter);
    });
  }

  /** A statement ended: its slot goes to a search begun, else to the organization that spent least. */
  private release(): void {
    this.running -= 1;
    if (this.running >= this.bounds.maxConcurrent || this.waiting.length === 0) return;
    let best = 0;
    for (let i = 1; i < this.waiting.length; i++) {
      const [candidate, chosen] = [this.waiting[i]!, this.waiting[best]!];
      if (candidate.begun !== chosen.begun ? candidate.begun : candidate.tenant.budgetMs > chosen.tenant.budgetMs)
        best = i;
    }
    const [next] = this.waiting.splice(best, 1);
    this.running += 1;
    next!.start();
  }

  private wait(ms: number): Promise<void> {
    return new Promise((resolve, reject) => void this.timer(ms, resolve, reject));
  }

  /** A timer that `close` ends with a refusal. */
  private timer(ms: number, done: () => void, refuse: (error: Error) => void): ReturnType<typeof setTimeout> {
    const timer = setTimeout(() => {
      this.forget(timer);
      done();
    }, ms);
    this.timers.set(timer, refuse);
    return timer;
  }

  private forget(timer: ReturnType<typeof setTimeout>): void {
    clearTimeout(timer);
    this.timers.delete(timer);
  }

  private refused<E extends Error>(error: E): E {
    this.stats.refused += 1;
    return error;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const [timer, refuse] of this.timers) {
      this.forget(timer);
      refuse(new ServiceUnavailableError(CLOSED, RETRY_AFTER_SECONDS));
    }
    this.waiting.length = 0;
    await Promise.all(this.closing.map((reads) => reads.close()));
  }
}

/** Whether a failed statement ran past its time bound (rather than finding the database gone). */
function timedOut(error: unknown): boolean {
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === '57014' || (typeof message === 'string' && /statement timeout|Query read timeout/i.test(message));
}
