import type { ChangeFeed } from './change-feed.js';

type Entry = { value: unknown; expires: number; tags: readonly string[] };

export type EntityCacheOptions = {
  /** Entries kept at most; the least recently stored go first. */
  maxEntries: number;
  /** A safety net only: entries are invalidated by the database's announcements long before. */
  ttlMs: number;
};

/** A read that may be stored: taken before the query, so a change announced meanwhile wins. */
export type CacheTicket = { readonly epoch: number };

/**
 * The process's cache of what nearly every request reads: accounts, organizations, signing keys,
 * purchases and monthly usage. The database announces every committed change (triggers and
 * LISTEN/NOTIFY, see `change-feed.ts`); each announcement drops the entries tagged with the changed
 * row, so a change made by any service shows on the next request after its announcement arrives.
 * While the feed is not live the cache is bypassed and emptied: reads go to the database.
 *
 * A read that started before an announcement is not stored (the epoch moved): its row may be the
 * one just replaced.
 */
export class EntityCache {
  private readonly entries = new Map<string, Entry>();
  private readonly byTag = new Map<string, Set<string>>();
  private epoch = 0;
  private readonly inFlight = new Map<string, { epoch: number; result: Promise<unknown> }>();
  private readonly unsubscribe: () => void;
  readonly stats = { hits: 0, misses: 0, invalidations: 0 };

  constructor(
    private readonly feed: ChangeFeed,
    private readonly options: EntityCacheOptions = { maxEntries: 20_000, ttlMs: 10 * 60_000 },
  ) {
    this.unsubscribe = feed.subscribe({
      change: (payload) => this.onChange(payload),
      reset: () => this.clear(),
    });
  }

  /** The cached value, wrapped so that a cached `null` (known not to exist) differs from a miss. */
  get<V>(key: string, now = Date.now()): { value: V } | undefined {
    if (!this.feed.live) return undefined;
    const entry = this.entries.get(key);
    if (entry === undefined || entry.expires <= now) {
      if (entry) this.delete(key);
      this.stats.misses += 1;
      return undefined;
    }
    this.stats.hits += 1;
    return entry as { value: V };
  }

  /** Take before reading the database; hand to `set` with what was read. */
  ticket(): CacheTicket {
    return { epoch: this.epoch };
  }

  /** Stores `value` unless a change was announced since `ticket` or the feed is not live. */
  set(ticket: CacheTicket, key: string, value: unknown, tags: readonly string[], now = Date.now()): void {
    if (ticket.epoch !== this.epoch || !this.feed.live || this.options.maxEntries <= 0) return;
    this.delete(key);
    if (this.entries.size >= this.options.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.delete(oldest.value);
    }
    this.entries.set(key, { value, expires: now + this.options.ttlMs, tags });
    for (const tag of tags) {
      let keys = this.byTag.get(tag);
      if (!keys) this.byTag.set(tag, (keys = new Set()));
      keys.add(key);
    }
  }

  /**
   * One computation per key at a time in this process: callers arriving while `compute` runs
   * share its result, unless a change was announced since it started. A costly miss (counting a
   * million children) thus runs once, not once per waiting request, and cannot exhaust the pool.
   */
  shared<V>(key: string, compute: () => Promise<V>): Promise<V> {
    const running = this.inFlight.get(key);
    // A computation that started before the last announced change may have read the old rows.
    if (running && running.epoch === this.epoch) return running.result as Promise<V>;
    const entry = { epoch: this.epoch, result: compute() };
    entry.result = entry.result.finally(() => {
      if (this.inFlight.get(key) === entry) this.inFlight.delete(key);
    });
    this.inFlight.set(key, entry);
    return entry.result as Promise<V>;
  }

  /** Drops every entry carrying `tag`. */
  invalidate(tag: string): void {
    this.epoch += 1;
    this.stats.invalidations += 1;
    const keys = this.byTag.get(tag);
    if (!keys) return;
    for (const key of [...keys]) this.delete(key);
  }

  clear(): void {
    this.epoch += 1;
    this.entries.clear();
    this.byTag.clear();
  }

  close(): void {
    this.unsubscribe();
    this.clear();
  }

  private delete(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    for (const tag of entry.tags) {
      const keys = this.byTag.get(tag);
      keys?.delete(key);
      if (keys?.size === 0) this.byTag.delete(tag);
    }
  }

  /** The triggers' JSON: {"t": entity, "id": key, "k"?: public key, "p"?: parent} or {"t": entity, "all": true}. */
  private onChange(payload: string): void {
    let change: { t?: unknown; id?: unknown; k?: unknown; p?: unknown; all?: unknown };
    try {
      change = JSON.parse(payload) as typeof change;
    } catch {
      this.clear();
      return;
    }
    const tagOf = typeof change.t === 'string' ? announcedTags[change.t] : undefined;
    if (change.all === true || tagOf === undefined || typeof change.id !== 'string') {
      this.clear();
      return;
    }
    this.invalidate(tagOf(change.id));
    if (typeof change.k === 'string') this.invalidate(cacheTags.publicKey(change.k));
    if (typeof change.p === 'string') this.invalidate(cacheTags.children(change.p));
  }
}

/** The tags an entry carries: the rows whose change must drop it. */
export const cacheTags = {
  account: (id: string) => `account:${id}`,
  publicKey: (key: string) => `publicKey:${key}`,
  organization: (parentId: string) => `organization:${parentId}`,
  purchases: (organizationId: string) => `purchases:${organizationId}`,
  usage: (organizationId: string) => `usage:${organizationId}`,
  /** Any change to any child of this parent. */
  children: (parentId: string) => `children:${parentId}`,
};

/** The triggers' entity names ("t" in an announcement), each with the tag of its key. */
const announcedTags: Record<string, ((key: string) => string) | undefined> = {
  account: cacheTags.account,
  organization: cacheTags.organization,
  purchases: cacheTags.purchases,
  usage: cacheTags.usage,
};
