import type { Snapshot } from './snapshots.js';

/** How many of a request's lookups the entity cache answered, and how many it missed. */
export type CacheLookups = { hits: number; misses: number };

/**
 * What one request read, for an answer computed from it that is kept (`answer-cache.ts`): the
 * tags of everything read through the cache, whether anything was read around it (then the
 * answer is not kept), and until when what was computed from the clock holds.
 */
export class ReadSet {
  constructor(
    /** Counted by the entity cache, for the request's trace; shared by the request's contexts. */
    readonly lookups: CacheLookups = { hits: 0, misses: 0 },
  ) {}

  /**
   * Each tag read, with what the value read is known to be current as of: the cache's epoch when
   * it was read, and the snapshot of the database read that it came from, when there was one.
   */
  readonly tags = new Map<string, TagRead>();
  /** Something was read outside the cache: no announcement would tell that it changed. */
  untracked = false;
  /** Epoch milliseconds until which the answer's clock-dependent parts hold. */
  validUntil = Number.POSITIVE_INFINITY;
  /** Clock readings whose validity was not stated yet. */
  private open = 0;

  add(tags: readonly string[], read: TagRead): void {
    for (const tag of tags) if (!this.tags.has(tag)) this.tags.set(tag, read);
  }

  /** The answer holds only at this instant (the default for anything computed from the clock). */
  instant(at: number): void {
    this.validUntil = Math.min(this.validUntil, at);
  }

  /** A clock reading whose consequence is stated later with `holdsUntil` (until then, not kept). */
  clock(): (until: number) => void {
    this.open += 1;
    let stated = false;
    return (until) => {
      if (!stated) this.open -= 1;
      stated = true;
      this.validUntil = Math.min(this.validUntil, until);
    };
  }

  /** Whether an answer made of these reads may be kept at `now`. */
  reusable(now: number): boolean {
    return !this.untracked && this.open === 0 && now < this.validUntil;
  }
}

/** When a value was read: the cache's epoch then, and the database snapshot it came from, if any. */
export type TagRead = { readonly epoch: number; readonly seen?: Snapshot | undefined };
