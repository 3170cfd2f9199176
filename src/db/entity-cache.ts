import { LRUCache } from 'lru-cache';
import { activeAt } from '../domain/activity.js';
import type { ChangeFeed } from './change-feed.js';

/**
 * What a read's snapshot saw (PostgreSQL's `pg_current_snapshot()`): every transaction below
 * `xmin`, and those below `xmax` not listed in `xip`, had committed (or rolled back) before it.
 */
export type Snapshot = { readonly xmin: number; readonly xmax: number; readonly xip: readonly number[] };

/** The snapshot column a versioned read adds to its select list (see `takeSnapshot`). */
export const SNAPSHOT_COLUMN = 'pg_current_snapshot()::text AS "readSnapshot"';

/** `xmin:xmax:xip,...` as PostgreSQL prints a snapshot; undefined for anything else. */
export function parseSnapshot(text: unknown): Snapshot | undefined {
  if (typeof text !== 'string') return undefined;
  const match = /^(\d+):(\d+):([\d,]*)$/.exec(text);
  if (!match) return undefined;
  const xip = match[3] === '' ? [] : match[3]!.split(',').map(Number);
  return { xmin: Number(match[1]), xmax: Number(match[2]), xip };
}

/** Whether the change of transaction `version` was visible to a read with this snapshot. */
export function sees(snapshot: Snapshot, version: number): boolean {
  return version < snapshot.xmin || (version < snapshot.xmax && !snapshot.xip.includes(version));
}

/**
 * The rows of a read made with `SNAPSHOT_COLUMN`, without that column, and the snapshot they were
 * read with (undefined when no row came back: such a read is stored only if nothing intervened).
 */
export function takeSnapshot<T>(rows: (T & { readSnapshot?: unknown })[]): { rows: T[]; seen: Snapshot | undefined } {
  const seen = parseSnapshot(rows[0]?.readSnapshot);
  for (const row of rows) delete row.readSnapshot;
  return { rows, seen };
}

type Entry = { value: unknown; tags: readonly string[]; seen?: Snapshot };

/** The last announcement of a tag: when (the cache's epoch) and, if the database said, by which transaction. */
type Invalidation = { epoch: number; version: number | undefined };

/** A read in flight whose result callers arriving meanwhile may share. */
type RunningRead = { epoch: number; result: Promise<{ value: unknown; seen?: Snapshot }> };

export type EntityCacheOptions = {
  /** Entries kept at most; the least recently used go first. */
  maxEntries: number;
  /** Estimated bytes kept at most (keys, values and tags); the least recently used go first. */
  maxBytes: number;
  /** A safety net only: entries are invalidated by the database's announcements long before. */
  ttlMs: number;
  /** The clock the child counts are computed with (epoch ms); the real one unless given. */
  now?: () => number;
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

/** A read that may be stored: taken before the query, so a change announced meanwhile wins (unless the read saw it). */
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
 *
 * Reads that carry their snapshot (`SNAPSHOT_COLUMN`) do better, which matters for the rows every
 * sign-in changes (an organization's balance and usage, its parent's counters): announcements say
 * which transaction made the change, so a read whose snapshot already saw it is stored anyway,
 * and an entry that saw it survives the announcement. Announcements arrive in commit order and a
 * snapshot sees every transaction committed before it, so seeing a tag's last announced change
 * means seeing all earlier ones.
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
  /** When each recently invalidated tag was invalidated last, and by which transaction. */
  private readonly invalidatedAt = new LRUCache<string, Invalidation>({
    max: INVALIDATIONS_REMEMBERED,
    dispose: (at, _tag, reason) => {
      if (reason === 'evict') this.forgottenUpTo = Math.max(this.forgottenUpTo, at.epoch);
    },
  });
  /** Reads older than this may have missed an invalidation no longer remembered: not stored. */
  private forgottenUpTo = 0;
  /** Reads older than the last clear are not stored. */
  private clearedAt = 0;
  /** Reads and computations in flight (`track`, `shared`), for callers arriving meanwhile (`join`, `shared`). */
  private readonly reads = new Map<string, RunningRead>();
  private readonly unsubscribe: () => void;
  private readonly now: () => number;
  readonly stats = { hits: 0, misses: 0, invalidations: 0, evictions: 0, sharedReads: 0 };

  constructor(
    private readonly feed: ChangeFeed,
    options: EntityCacheOptions = CACHE_DEFAULTS,
  ) {
    this.now = options.now ?? Date.now;
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
   * Stores `value` unless one of its tags was invalidated since `ticket` by a change the read did
   * not see (`seen`: its snapshot, when it has one), or the feed is not live. A tag spelled as the
   * key itself (an account's row under `account:<id>`) needs no index: an invalidation drops the
   * entry of that key directly.
   */
  set(ticket: CacheTicket, key: string, value: unknown, tags: readonly string[], seen?: Snapshot): void {
    if (!this.feed.live || !this.entries || !this.unchangedSince(ticket, tags, seen)) return;
    const indexed = tags.length === 1 && tags[0] === key ? NO_TAGS : tags.includes(key) ? tags.filter((tag) => tag !== key) : tags;
    this.store(key, seen ? { value, tags: indexed, seen } : { value, tags: indexed });
  }

  private store(key: string, entry: Entry): void {
    if (!this.entries) return;
    // An entry larger than the whole bound is not stored (and any older one under the key is dropped).
    this.entries.set(key, entry);
    if (this.entries.peek(key) !== entry) return;
    for (const tag of entry.tags) {
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
    const running = this.reads.get(key);
    // A computation that started before a change to what it reads may have read the old rows.
    if (running && this.unchangedSince(running, tags)) return running.result.then((read) => read.value as V);
    const result = compute().then((value) => ({ value }));
    this.track(key, this.ticket(), result);
    return result.then((read) => read.value);
  }

  /**
   * A read of `key` that another caller has in flight (see `track`), as a caller arriving now may
   * use it: resolves to its value, or to undefined when the read may predate a change announced
   * before this caller came and it did not see (the caller then reads for itself). Undefined when
   * no read of `key` is in flight.
   */
  join<V>(key: string, tags: readonly string[]): Promise<{ value: V } | undefined> | undefined {
    const running = this.reads.get(key);
    if (!running) return undefined;
    // Nothing announced since it started: it reads at least everything this caller knows of.
    const clean = this.unchangedSince(running, tags);
    this.stats.sharedReads += 1;
    return running.result.then((read) =>
      clean || this.unchangedSince(running, tags, read.seen) ? { value: read.value as V } : undefined,
    );
  }

  /** Offers a read of `key`, started after `ticket` was taken, to callers arriving while it runs. */
  track(key: string, ticket: CacheTicket, result: Promise<{ value: unknown; seen?: Snapshot }>): void {
    const running: RunningRead = { epoch: ticket.epoch, result };
    this.reads.set(key, running);
    const done = () => {
      if (this.reads.get(key) === running) this.reads.delete(key);
    };
    result.then(done, done);
  }

  /**
   * Whether none of `tags` was invalidated (and nothing cleared) since `ticket` was taken, other
   * than by changes a read with snapshot `seen` saw.
   */
  private unchangedSince(ticket: CacheTicket, tags: readonly string[], seen?: Snapshot): boolean {
    if (ticket.epoch < this.clearedAt || ticket.epoch < this.forgottenUpTo) return false;
    for (const tag of tags) {
      const last = this.invalidatedAt.peek(tag);
      if (last === undefined || last.epoch <= ticket.epoch) continue;
      if (seen === undefined || last.version === undefined || !sees(seen, last.version)) return false;
    }
    return true;
  }

  /**
   * Drops every entry carrying `tag`, except those read with a snapshot that saw the change
   * (transaction `version`, when the announcement names it).
   */
  invalidate(tag: string, version?: number): void {
    this.epoch += 1;
    this.invalidatedAt.set(tag, { epoch: this.epoch, version });
    this.stats.invalidations += 1;
    this.drop(tag, version);
    const keys = this.byTag.get(tag);
    if (keys === undefined) return;
    if (typeof keys === 'string') this.drop(keys, version);
    else for (const key of [...keys]) this.drop(key, version);
  }

  private drop(key: string, version: number | undefined): void {
    const entry = this.entries?.peek(key);
    if (entry === undefined) return;
    if (version !== undefined && entry.seen !== undefined && sees(entry.seen, version)) return;
    this.entries!.delete(key);
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
   * The triggers' JSON: {"t": entity, "id": key, "x": transaction, "k"?: public key, "p"?:
   * parent, "s"?: whether what authentication relies on changed, "l"/"n"?: last login before and
   * after} or {"t": entity, "all": true}. A change of activity columns only ("s": false: counters,
   * last login, balances) drops the rows, not the identities, signing keys and verified tokens
   * built on them; and a child who was active and still is leaves its parent's counts as they were.
   */
  private onChange(payload: string): void {
    let change: { t?: unknown; id?: unknown; x?: unknown; k?: unknown; p?: unknown; s?: unknown; l?: unknown; n?: unknown; all?: unknown };
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
    const version = typeof change.x === 'number' && Number.isSafeInteger(change.x) ? change.x : undefined;
    this.invalidate(tagOf(change.id), version);
    const stable = change.s !== false;
    if (stable && change.t === 'account') this.invalidate(cacheTags.identity(change.id), version);
    if (stable && change.t === 'organization') this.invalidate(cacheTags.organizationSettings(change.id), version);
    if (stable && typeof change.k === 'string') this.invalidate(cacheTags.publicKey(change.k), version);
    if (typeof change.p === 'string') this.childChanged(change.p, stable, change.l, change.n, version);
  }

  /**
   * A child of `parentId` changed. Its parent's counts change only if the child was added,
   * removed, renamed or moved (a stable change), or became active or inactive. A child logging
   * in for the first time in the window (what most sign-ins are) adds one to the parent's
   * unfiltered active count, which is amended in place rather than counted again; the filtered
   * counts are dropped.
   */
  private childChanged(parentId: string, stable: boolean, lastLoginBefore: unknown, lastLoginAfter: unknown, version: number | undefined): void {
    // Announcements that name their transaction carry the logins too (absent: never logged in).
    const known = (login: unknown): login is number | null => version !== undefined && (login === null || typeof login === 'number');
    const before = lastLoginBefore === undefined ? null : lastLoginBefore;
    const after = lastLoginAfter === undefined ? null : lastLoginAfter;
    const now = this.now();
    const wasActive = known(before) && activeAt(before, now);
    const isActive = known(after) && activeAt(after, now);
    if (!stable && known(before) && known(after) && wasActive === isActive) return;
    const key = childCountsKey(parentId);
    const counts = this.entries?.peek(key);
    this.invalidate(cacheTags.children(parentId), version);
    if (stable || wasActive || !isActive || !counts || !this.feed.live) return;
    if (version !== undefined && counts.seen && sees(counts.seen, version)) return;
    const value = counts.value as ChildCounts;
    // Only while fresh: every child it counted logged in after `validUntil` minus the window, so
    // this one, inactive until now, was not among them.
    if (now < value.computedAt || now >= value.validUntil) return;
    this.store(key, { ...counts, value: { ...value, active: value.active + 1 } });
  }
}

/**
 * A parent's child counts as cached (see `services/list-child-accounts.ts`): `total` null when
 * taken from the organization's child count; valid from `computedAt` until `validUntil`, when the
 * oldest login it counted as active leaves the window.
 */
export type ChildCounts = { total: number | null; active: number; computedAt: number; validUntil: number };

/** The key of a parent's unfiltered child counts (no search, no dates). */
export const childCountsKey = (parentId: string) => `stats:${parentId}|||`;

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
