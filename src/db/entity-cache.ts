import { LRUCache } from 'lru-cache';
import type { ChangeFeed } from './change-feed.js';

type Entry = { value: unknown; tags: readonly string[] };

export type EntityCacheOptions = {
  /** Entries kept at most; the least recently used go first. */
  maxEntries: number;
  /** Estimated bytes kept at most (keys, values and tags); the least recently used go first. */
  maxBytes: number;
  /** A safety net only: entries are invalidated by the database's announcements long before. */
  ttlMs: number;
};

/** Bytes that an opaque object (a WebCrypto key) is counted as. */
const OPAQUE_BYTES = 256;

/**
 * An estimate of the memory a cached value holds: strings at two bytes a character, numbers and
 * booleans at 8, dates at 32, objects and arrays at 32 plus their members. Deliberately generous,
 * so that the configured byte bound is an upper bound in practice.
 */
export function estimateBytes(value: unknown, depth = 0): number {
  switch (typeof value) {
    case 'string':
      return 16 + 2 * value.length;
    case 'number':
    case 'boolean':
    case 'bigint':
      return 8;
    case 'object': {
      if (value === null) return 8;
      if (value instanceof Date) return 32;
      if (ArrayBuffer.isView(value)) return 64 + value.byteLength;
      if (depth > 6) return OPAQUE_BYTES;
      const prototype = Object.getPrototypeOf(value) as unknown;
      if (!Array.isArray(value) && prototype !== Object.prototype && prototype !== null && !('toNumber' in (value as object))) {
        return OPAQUE_BYTES;
      }
      let bytes = 32;
      if (Array.isArray(value)) for (const item of value) bytes += 8 + estimateBytes(item, depth + 1);
      else for (const [key, member] of Object.entries(value)) bytes += 8 + 2 * key.length + estimateBytes(member, depth + 1);
      return bytes;
    }
    default:
      return 8;
  }
}

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
  /** Undefined when the cache is turned off (no entries or no bytes allowed). */
  private readonly entries: LRUCache<string, Entry> | undefined;
  /** Which keys carry a tag; kept in step with `entries` by its dispose hook. */
  private readonly byTag = new Map<string, Set<string>>();
  private epoch = 0;
  private readonly inFlight = new Map<string, { epoch: number; result: Promise<unknown> }>();
  private readonly unsubscribe: () => void;
  readonly stats = { hits: 0, misses: 0, invalidations: 0, evictions: 0 };

  constructor(
    private readonly feed: ChangeFeed,
    options: EntityCacheOptions = { maxEntries: 20_000, maxBytes: 32 * 1024 * 1024, ttlMs: 10 * 60_000 },
  ) {
    if (options.maxEntries > 0 && options.maxBytes > 0) {
      this.entries = new LRUCache<string, Entry>({
        max: options.maxEntries,
        maxSize: options.maxBytes,
        sizeCalculation: (entry, key) => 64 + 2 * key.length + estimateBytes(entry.value) + estimateBytes(entry.tags),
        ttl: options.ttlMs,
        dispose: (entry, key, reason) => {
          if (reason === 'evict') this.stats.evictions += 1;
          this.untag(key, entry.tags);
        },
      });
    }
    this.unsubscribe = feed.subscribe({
      change: (payload) => this.onChange(payload),
      reset: () => this.clear(),
    });
  }

  /** Entries held now. */
  get size(): number {
    return this.entries?.size ?? 0;
  }

  /** Estimated bytes held now (never above the configured bound). */
  get bytes(): number {
    return this.entries?.calculatedSize ?? 0;
  }

  /** The cached value, wrapped so that a cached `null` (known not to exist) differs from a miss. */
  get<V>(key: string): { value: V } | undefined {
    if (!this.feed.live || !this.entries) return undefined;
    const entry = this.entries.get(key);
    if (entry === undefined) {
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
  set(ticket: CacheTicket, key: string, value: unknown, tags: readonly string[]): void {
    if (ticket.epoch !== this.epoch || !this.feed.live || !this.entries) return;
    const entry: Entry = { value, tags };
    // An entry larger than the whole bound is not stored (and any older one under the key is dropped).
    this.entries.set(key, entry);
    if (this.entries.peek(key) !== entry) return;
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
    for (const key of [...keys]) this.entries?.delete(key);
  }

  clear(): void {
    this.epoch += 1;
    this.entries?.clear();
    this.byTag.clear();
  }

  close(): void {
    this.unsubscribe();
    this.clear();
  }

  private untag(key: string, tags: readonly string[]): void {
    for (const tag of tags) {
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
