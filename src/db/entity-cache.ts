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

/** The cache's own bytes per entry: its slot in the LRU's map and lists, and the entry object. */
const ENTRY_OVERHEAD_BYTES = 112;
/** The tag index's bytes per tag an entry carries (a member of a set, or a map entry and its tag). */
const TAG_INDEX_BYTES = 64;

/** The tags of an entry whose only tag is its own key. */
const NO_TAGS: readonly string[] = [];

/**
 * About 50,000 signed-in users (a verified token and an account each, about a kilobyte of heap
 * together) besides their organizations: the working set of a large organization, within the
 * process's memory goal (250 MB resident).
 */
export const CACHE_DEFAULTS: EntityCacheOptions = { maxEntries: 150_000, maxBytes: 80 * 1024 * 1024, ttlMs: 10 * 60_000 };

/** Bytes that an opaque object (a WebCrypto key) is counted as. */
const OPAQUE_BYTES = 256;

/** Strings V8 holds at one byte a character (Latin-1 only). */
const ONE_BYTE = /^[\u0000-\u00ff]*$/;

/**
 * An estimate of the heap a cached value holds, from V8's layout on 64 bits: strings at their
 * header plus one byte a character (two outside Latin-1), numbers beyond a small integer at a
 * boxed double, dates at 96, objects and arrays at a header plus a slot per member. Rounded up
 * rather than down, so that the configured byte bound is an upper bound in practice (the cache's
 * memory test holds it to the heap measured for cached users).
 */
export function estimateBytes(value: unknown, depth = 0): number {
  switch (typeof value) {
    case 'string':
      return 16 + 8 * Math.ceil((ONE_BYTE.test(value) ? value.length : 2 * value.length) / 8);
    case 'number':
      return Number.isInteger(value) && Math.abs(value) < 2 ** 31 ? 8 : 16;
    case 'boolean':
    case 'bigint':
      return 8;
    case 'object': {
      if (value === null) return 8;
      if (value instanceof Date) return 96;
      if (ArrayBuffer.isView(value)) return 64 + value.byteLength;
      if (depth > 6) return OPAQUE_BYTES;
      const prototype = Object.getPrototypeOf(value) as unknown;
      if (!Array.isArray(value) && prototype !== Object.prototype && prototype !== null && !('toNumber' in (value as object))) {
        return OPAQUE_BYTES;
      }
      let bytes = 32;
      if (Array.isArray(value)) for (const item of value) bytes += 8 + estimateBytes(item, depth + 1);
      // Property names live in the shape V8 shares between objects of one layout (rows alike).
      else for (const member of Object.values(value)) bytes += 8 + estimateBytes(member, depth + 1);
      return bytes;
    }
    default:
      return 8;
  }
}

/** A read that may be stored: taken before the query, so a change announced meanwhile wins. */
export type CacheTicket = { readonly epoch: number };

/** Invalidated tags remembered, with when: enough for every read in flight, bounded. */
const INVALIDATIONS_REMEMBERED = 10_000;

/**
 * The process's cache of what nearly every request reads: accounts, organizations, signing keys,
 * purchases and monthly usage. The database announces every committed change (triggers and
 * LISTEN/NOTIFY, see `change-feed.ts`); each announcement drops the entries tagged with the changed
 * row, so a change made by any service shows on the next request after its announcement arrives.
 * While the feed is not live the cache is bypassed and emptied: reads go to the database.
 *
 * A read that started before an announcement of one of its tags is not stored: its row may be
 * the one just replaced. Each tag remembers when it was last invalidated, so a change to one
 * organization does not stop caching for the others.
 */
export class EntityCache {
  /** Undefined when the cache is turned off (no entries or no bytes allowed). */
  private readonly entries: LRUCache<string, Entry> | undefined;
  /**
   * Which keys carry a tag; kept in step with `entries` by its dispose hook. Most tags belong to
   * one entry (an account's own): those hold the key itself rather than a set of one.
   */
  private readonly byTag = new Map<string, string | Set<string>>();
  /** Counts invalidations; a ticket is the count when its read started. */
  private epoch = 0;
  /** When each recently invalidated tag was invalidated last. */
  private readonly invalidatedAt = new LRUCache<string, number>({
    max: INVALIDATIONS_REMEMBERED,
    dispose: (at, _tag, reason) => {
      if (reason === 'evict') this.forgottenUpTo = Math.max(this.forgottenUpTo, at);
    },
  });
  /** Reads older than this may have missed an invalidation no longer remembered: not stored. */
  private forgottenUpTo = 0;
  /** Reads older than the last clear are not stored. */
  private clearedAt = 0;
  private readonly inFlight = new Map<string, { epoch: number; result: Promise<unknown> }>();
  private readonly unsubscribe: () => void;
  readonly stats = { hits: 0, misses: 0, invalidations: 0, evictions: 0 };

  constructor(
    private readonly feed: ChangeFeed,
    options: EntityCacheOptions = CACHE_DEFAULTS,
  ) {
    if (options.maxEntries > 0 && options.maxBytes > 0) {
      this.entries = new LRUCache<string, Entry>({
        max: options.maxEntries,
        maxSize: options.maxBytes,
        // Tag strings are not counted: most are shared by many entries (an organization's) or are
        // the entry's own key; an entry's place in the tag index is.
        sizeCalculation: (entry, key) => ENTRY_OVERHEAD_BYTES + estimateBytes(key) + estimateBytes(entry.value) + TAG_INDEX_BYTES * entry.tags.length,
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

  /**
   * Stores `value` unless one of its tags was invalidated since `ticket`, or the feed is not live.
   * A tag spelled as the key itself (an account's row under `account:<id>`) needs no index: an
   * invalidation drops the entry of that key directly.
   */
  set(ticket: CacheTicket, key: string, value: unknown, tags: readonly string[]): void {
    if (!this.feed.live || !this.entries || !this.unchangedSince(ticket, tags)) return;
    const indexed = tags.length === 1 && tags[0] === key ? NO_TAGS : tags.includes(key) ? tags.filter((tag) => tag !== key) : tags;
    const entry: Entry = { value, tags: indexed };
    // An entry larger than the whole bound is not stored (and any older one under the key is dropped).
    this.entries.set(key, entry);
    if (this.entries.peek(key) !== entry) return;
    for (const tag of indexed) {
      const keys = this.byTag.get(tag);
      if (keys === undefined) this.byTag.set(tag, key);
      else if (typeof keys !== 'string') keys.add(key);
      else if (keys !== key) this.byTag.set(tag, new Set([keys, key]));
    }
  }

  /**
   * One computation per key at a time in this process: callers arriving while `compute` runs
   * share its result, unless a change was announced since it started. A costly miss (counting a
   * million children) thus runs once, not once per waiting request, and cannot exhaust the pool.
   */
  shared<V>(key: string, tags: readonly string[], compute: () => Promise<V>): Promise<V> {
    const running = this.inFlight.get(key);
    // A computation that started before a change to what it reads may have read the old rows.
    if (running && this.unchangedSince(running, tags)) return running.result as Promise<V>;
    const entry = { epoch: this.epoch, result: compute() };
    entry.result = entry.result.finally(() => {
      if (this.inFlight.get(key) === entry) this.inFlight.delete(key);
    });
    this.inFlight.set(key, entry);
    return entry.result as Promise<V>;
  }

  /** Whether none of `tags` was invalidated (and nothing cleared) since `ticket` was taken. */
  private unchangedSince(ticket: CacheTicket, tags: readonly string[]): boolean {
    if (ticket.epoch < this.clearedAt || ticket.epoch < this.forgottenUpTo) return false;
    for (const tag of tags) if ((this.invalidatedAt.peek(tag) ?? 0) > ticket.epoch) return false;
    return true;
  }

  /** Drops every entry carrying `tag`. */
  invalidate(tag: string): void {
    this.epoch += 1;
    this.invalidatedAt.set(tag, this.epoch);
    this.stats.invalidations += 1;
    this.entries?.delete(tag);
    const keys = this.byTag.get(tag);
    if (keys === undefined) return;
    if (typeof keys === 'string') this.entries?.delete(keys);
    else for (const key of [...keys]) this.entries?.delete(key);
  }

  clear(): void {
    this.epoch += 1;
    this.clearedAt = this.epoch;
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
      if (keys === key) this.byTag.delete(tag);
      else if (typeof keys === 'object') {
        keys.delete(key);
        if (keys.size === 0) this.byTag.delete(tag);
      }
    }
  }

  /**
   * The triggers' JSON: {"t": entity, "id": key, "k"?: public key, "p"?: parent, "s"?: whether
   * what authentication relies on changed} or {"t": entity, "all": true}. A change of activity
   * columns only ("s": false: counters, last login, balances) drops the rows, not the identities,
   * signing keys and verified tokens built on them.
   */
  private onChange(payload: string): void {
    let change: { t?: unknown; id?: unknown; k?: unknown; p?: unknown; s?: unknown; all?: unknown };
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
    const stable = change.s !== false;
    if (stable && change.t === 'account') this.invalidate(cacheTags.identity(change.id));
    if (stable && change.t === 'organization') this.invalidate(cacheTags.organizationSettings(change.id));
    if (stable && typeof change.k === 'string') this.invalidate(cacheTags.publicKey(change.k));
    if (typeof change.p === 'string') this.invalidate(cacheTags.children(change.p));
  }
}

/** The tags an entry carries: the rows whose change must drop it. */
export const cacheTags = {
  /** Any change to the account row. */
  account: (id: string) => `account:${id}`,
  /** A change to the account's identity (not its activity counters): type, status, keys, ... */
  identity: (id: string) => `identity:${id}`,
  /** The account holding this key, or its identity, changed (or one with this key appeared). */
  publicKey: (key: string) => `publicKey:${key}`,
  /** Any change to the organization row but the retrieval counter. */
  organization: (parentId: string) => `organization:${parentId}`,
  /** A change to the organization other than its balances (its signing secret among others), or its balance reaching or leaving zero. */
  organizationSettings: (parentId: string) => `organizationSettings:${parentId}`,
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
