import type { Snapshot } from './snapshots.js';

/** How many of a request's lookups the entity cache answered, and how many it missed. */
export type CacheLookups = { hits: number; misses: number };

/**
 * What one request read, for an answer computed from it that is held (`RequestContext.sharedAnswer`):
 * the tags of everything read through the cache, whether anything was read around it or computed
 * from the clock (then the answer is not held).
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
  /** Something was read outside the cache, or computed from the clock: no announcement would tell that it changed. */
  untracked = false;

  add(tags: readonly string[], read: TagRead): void {
    for (const tag of tags) if (!this.tags.has(tag)) this.tags.set(tag, read);
  }
}

/** When a value was read: the cache's epoch then, and the database snapshot it came from, if any. */
export type TagRead = { readonly epoch: number; readonly seen?: Snapshot | undefined };
