import DataLoader from 'dataloader';
import { LRUCache } from 'lru-cache';
import type { ChangeFeed } from './capture/feed.js';
import type { Change, RowChange } from './capture/changes.js';
import type { SqlDriver } from './sql-driver.js';
import { estimateBytes } from './estimate-bytes.js';
import { TagIndex } from './tag-index.js';
import { FrequencySketch } from './frequency-sketch.js';
import { RECORDS_SHARE, RecordRing } from './record-ring.js';
import { sees, snapshotQuery, type Snapshot, type SnapshotQuery } from './snapshots.js';
import { ReadSet, type TagRead } from './read-set.js';
import { droppedBy } from './cache-tags.js';

type Entry = { value: unknown; tags: readonly string[]; seen?: Snapshot; amend?: Amend<unknown> };

/** How a change that drops an entry may bring it up to date instead (undefined: drop it); asked once a change. */
export type Amend<V> = (value: V | null, change: RowChange, now: number) => V | null | undefined;

/** The last announcement of a tag: when (the cache's epoch) and, if the database said, by which transaction. */
type Invalidation = { epoch: number; version: number | undefined };

type RunningRead = { epoch: number; result: Promise<{ value: unknown; seen?: Snapshot }> };

export type EntityCacheOptions = {
  maxEntries: number;
  maxBytes: number;
  /** Of `maxBytes`, the record ring's, outside the heap (by default `RECORDS_SHARE`). */
  recordBytes?: number;
  /** A safety net only: entries are invalidated by the database's announcements long before. */
  ttlMs: number;
};

/** A value as text for the record ring: `decode(encode(v), key)` must equal `v` (never asked of `null`). */
export type CompactForm<V> = { encode: (value: V) => string; decode: (text: string, key: string) => V };

/** How to find a cached thing's values: what `hit` needs of its declaration. */
export type CachedLookup<V> = {
  /** Prefixed to each key (`<namespace>:<key>`); '' for keys that are whole already. */
  namespace: string;
  /** The tags of a key's value (a `null` value: no such row). */
  tags: (key: string, value: V | null) => readonly string[];
  /** Held in the record ring as text rather than as an entry (see `CompactForm`): not amended, dropped. */
  compact?: CompactForm<V>;
  /** Whether a cached value may still be served (a count past its validity is read again). */
  usable?: (value: V) => boolean;
};

/** One cached thing, declared once: how it is found, read, shared and kept current. */
export type CachedRead<V> = CachedLookup<V> & {
  /** Reads the missing keys' values; the misses of every request in one turn of the event loop are read together. */
  load: (misses: string[], query: SnapshotQuery) => Promise<Map<string, V>>;
  /** Callers of other requests missing the same key while a read of it runs share that read. */
  share?: boolean;
  /** Kept through the changes it can follow (see `Amend`), rather than dropped and read again. */
  amend?: Amend<V>;
  /** Only for one value under its whole key (`through`): where its statements go. */
  via?: Pick<SqlDriver, 'query'>;
};

/** One value under its whole key: `through`'s declaration (its tags may depend on the value read). */
export type CachedValue<V> = Omit<CachedRead<V>, 'namespace' | 'tags' | 'load'> & {
  tags: readonly string[] | ((value: V) => readonly string[]);
  read: (query: SnapshotQuery) => Promise<V>;
  /** Where `read`'s statements go, when not the cache's own connection (a search's bounded reads). */
  via?: Pick<SqlDriver, 'query'>;
};

/** About the least an entry is estimated at (a verified token's): what sizes the frequency sketch. */
const SMALL_ENTRY_BYTES = 512;

/** Room enough for an entry of the usual size (an account's is about 700 bytes): below it, the cache is full. */
const ADMISSION_ROOM_BYTES = 2048;

/** The cache's own bytes per entry: its slot in the LRU's map and lists, and the entry object. */
const ENTRY_OVERHEAD_BYTES = 112;
/** The tag index's bytes per tag an entry carries (a member of a set, or a map entry and its tag). */
const TAG_INDEX_BYTES = 64;

/** Below this, no ring: everything is an entry. */
const RING_MIN_BYTES = 16 * 1024;
/** Room enough for a record of the usual size (an account's is about 300 bytes): below it, the ring is full. */
const RING_ROOM_BYTES = 512;

const NO_TAGS: readonly string[] = [];

/** The tags besides the entry's own key: a tag spelled as the key needs no index, an invalidation names it directly. */
const besidesKey = (tags: readonly string[], key: string): readonly string[] =>
  tags.length === 1 && tags[0] === key ? NO_TAGS : tags.includes(key) ? tags.filter((tag) => tag !== key) : tags;

/** The entries' count and lifetime unless set; their bytes come from the memory budget (`ops/memory-budget.ts`). */
export const CACHE_DEFAULTS: Omit<EntityCacheOptions, 'maxBytes'> = { maxEntries: 150_000, ttlMs: 10 * 60_000 };

/** A read that may be stored: taken before the query, so a change announced meanwhile wins (unless the read saw it). */
type CacheTicket = { readonly epoch: number };

/** A key as the cache holds it: `<namespace>:<key>`, or the key itself in the namespace ''. */
const keyIn = (namespace: string, key: string) => (namespace === '' ? key : `${namespace}:${key}`);

/** The lookup of a value under its whole key whose tags were stored with it (`computed`). */
const COMPUTED: CachedLookup<unknown> = { namespace: '', tags: () => NO_TAGS };

export const MISS: unique symbol = Symbol('miss');

export type CacheReader = Pick<EntityCache, 'through' | 'throughMany' | 'hit'>;

/** The most keys one statement reads for the misses of many requests (more make several). */
const BATCH_MAX_KEYS = 256;

type BatchedValue = { value: unknown; seen: Snapshot | undefined };

/** Invalidated tags remembered, with when: enough for every read in flight, bounded. */
const INVALIDATIONS_REMEMBERED = 10_000;

/** The process's cache of what nearly every request reads, kept honest by the database's change announcements. */
export class EntityCache {
  /** Undefined when the cache is turned off (no entries or no bytes allowed). */
  private readonly entries: LRUCache<string, Entry> | undefined;
  /** The values declared `compact`, as bytes (undefined when the bound is too small for one). */
  private readonly ring: RecordRing | undefined;
  /** How often keys were asked for lately: whether a new entry may evict the least recently used (`admits`). */
  private readonly sketch: FrequencySketch;
  /** Which keys carry a tag; kept in step with `entries` by its dispose hook. */
  private readonly byTag = new TagIndex();
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
  /** Reads in flight (`track`), for callers arriving meanwhile (`join`). */
  private readonly reads = new Map<string, RunningRead>();
  /** Per namespace, the misses of every request in this turn of the event loop, read together (`batched`). */
  private readonly batches = new Map<string, DataLoader<string, BatchedValue>>();
  private readonly unsubscribe: () => void;
  readonly stats = { hits: 0, misses: 0, invalidations: 0, evictions: 0, refused: 0, sharedReads: 0, announcements: 0 };

  constructor(
    private readonly feed: ChangeFeed,
    options: EntityCacheOptions,
    private readonly sql?: Pick<SqlDriver, 'query'>,
    /** The clock changes are judged by (which sign-ins change the active counts, see `droppedBy`). */
    private readonly now: () => number = Date.now,
  ) {
    // Sized for the entries the bounds allow (an entry is rarely under 512 estimated bytes).
    this.sketch = new FrequencySketch(Math.min(options.maxEntries, options.maxBytes / SMALL_ENTRY_BYTES));
    // The sketch and the ring take their parts of the bound; the entries take what is left.
    const shared = options.maxBytes - this.sketch.bytes;
    const ringBytes = Math.min(shared, options.recordBytes ?? Math.floor(shared * RECORDS_SHARE));
    if (options.maxEntries > 0 && shared > 0 && ringBytes >= RING_MIN_BYTES)
      this.ring = new RecordRing(ringBytes, options.ttlMs);
    if (options.maxEntries > 0 && shared > 0) {
      this.entries = new LRUCache<string, Entry>({
        max: options.maxEntries,
        maxSize: this.ring ? shared - ringBytes : shared,
        // Tag strings are shared or the key itself, so only the tag index's slots are counted.
        sizeCalculation: (entry, key) =>
          ENTRY_OVERHEAD_BYTES + estimateBytes(key) + estimateBytes(entry.value) + TAG_INDEX_BYTES * entry.tags.length,
        ttl: options.ttlMs,
        dispose: (entry, key, reason) => {
          if (reason === 'evict') this.stats.evictions += 1;
          this.byTag.remove(key, entry.tags);
        },
      });
    }
    this.unsubscribe = feed.subscribe({
      change: (change) => this.onChange(change),
      reset: () => this.clear(),
    });
  }

  /** Whether entries may be served: the database's announcements are being heard. */
  get live(): boolean {
    return this.feed.live && this.entries !== undefined;
  }

  /** Resolves once every change committed before the call has been applied (tests, probes). */
  caughtUp(timeoutMs?: number): Promise<void> {
    return this.feed.caughtUp(timeoutMs);
  }

  /** The read-through calls with every read recorded in `reads`, so that an answer made of it is dropped with them. */
  recording(reads: ReadSet): CacheReader {
    return {
      throughMany: (read, keys) => this.throughMany(read, keys, reads),
      through: (key, value) => this.through(key, value, reads),
      hit: (lookup, key) => this.hit(lookup, key, reads),
    };
  }

  get size(): number {
    return (this.entries?.size ?? 0) + (this.ring?.size ?? 0);
  }

  /** Evicts the least recently used entries and the oldest records until at most `bytes` are held (memory pressure). */
  shrinkTo(bytes: number): void {
    const held = this.bytes;
    if (held <= bytes) return;
    const kept = bytes / held;
    const entryBytes = (this.entries?.calculatedSize ?? 0) * kept;
    while (this.entries && this.entries.size > 0 && this.entries.calculatedSize > entryBytes) this.entries.pop();
    this.ring?.shrinkTo(this.ring.bytes * kept);
  }

  get bytes(): number {
    return (this.entries?.calculatedSize ?? 0) + (this.ring?.bytes ?? 0);
  }

  private counted(hit: boolean, reads: ReadSet | undefined): void {
    if (hit) {
      this.stats.hits += 1;
      if (reads) reads.lookups.hits += 1;
    } else {
      this.stats.misses += 1;
      if (reads) reads.lookups.misses += 1;
    }
  }

  private ticket(): CacheTicket {
    return { epoch: this.epoch };
  }

  /** Stores `value` unless a tag of it was invalidated since `ticket` by a change the read did not see. */
  private set(
    ticket: CacheTicket,
    key: string,
    value: unknown,
    tags: readonly string[],
    seen: Snapshot | undefined,
    amend: Amend<unknown> | undefined,
  ): void {
    if (!this.feed.live || !this.entries || !this.unchangedSince(ticket, tags, seen)) return;
    const entry: Entry = { value, tags: besidesKey(tags, key) };
    if (seen) entry.seen = seen;
    if (amend) entry.amend = amend;
    this.store(key, entry);
  }

  /**
   * Whether a value read for `key` may be stored: always while there is room, else only if the key was
   * asked for more often lately than the entry it would evict (TinyLFU's admission).
   */
  private admits(key: string): boolean {
    const entries = this.entries;
    if (!entries || !this.feed.live) return false;
    this.sketch.increment(key);
    if (entries.size < entries.max && entries.calculatedSize + ADMISSION_ROOM_BYTES <= entries.maxSize) return true;
    if (entries.has(key)) return true;
    const victim = entries.rkeys().next();
    if (victim.done === true || this.sketch.admits(key, victim.value)) return true;
    this.stats.refused += 1;
    return false;
  }

  private store(key: string, entry: Entry): void {
    if (!this.entries) return;
    this.entries.set(key, entry);
    if (this.entries.peek(key) !== entry) return;
    this.byTag.add(key, entry.tags);
  }

  /** The value held for `key`, recorded in `reads`; `MISS` when none. Counts only hits (misses: `throughMany`). */
  hit<V>(lookup: CachedLookup<V>, key: string, reads?: ReadSet): V | null | typeof MISS {
    const value = this.lookUp(lookup, key, reads);
    if (value !== MISS) this.counted(true, reads);
    return value;
  }

  /** `lookUp`, counted as a hit or a miss: for a caller that goes on to read what it misses. */
  private lookUpCounted<V>(lookup: CachedLookup<V>, key: string, reads: ReadSet | undefined): V | null | typeof MISS {
    const value = this.lookUp(lookup, key, reads);
    this.counted(value !== MISS, reads);
    return value;
  }

  private lookUp<V>(lookup: CachedLookup<V>, key: string, reads: ReadSet | undefined): V | null | typeof MISS {
    if (!this.feed.live || !this.entries) return MISS;
    const held = keyIn(lookup.namespace, key);
    if (lookup.compact && this.ring) return this.lookUpRecord(lookup, lookup.compact, key, held, reads);
    const entry = this.entries.get(held);
    if (entry === undefined) return MISS;
    this.sketch.increment(held);
    const value = entry.value as V | null;
    if (value !== null && lookup.usable && !lookup.usable(value)) return MISS;
    reads?.add(lookup.tags(key, value), { epoch: this.epoch, seen: entry.seen });
    return value;
  }

  /** `lookUp` of a value held in the ring: current as of now (it was not dropped), without a snapshot. */
  private lookUpRecord<V>(
    lookup: CachedLookup<V>,
    compact: CompactForm<V>,
    key: string,
    held: string,
    reads: ReadSet | undefined,
  ): V | null | typeof MISS {
    const hash = RecordRing.hash(held);
    const text = this.ring!.get(held, hash);
    if (text === undefined) return MISS;
    this.sketch.incrementHash(hash);
    const value = text === '' ? null : compact.decode(text, key);
    if (value !== null && lookup.usable && !lookup.usable(value)) return MISS;
    reads?.add(lookup.tags(key, value), { epoch: this.epoch });
    return value;
  }

  /** Stores a `compact` value in the ring, on the terms of `set` and of `admits`. */
  private storeRecord<V>(
    ticket: CacheTicket,
    held: string,
    value: V | null,
    compact: CompactForm<V>,
    tags: readonly string[],
    seen: Snapshot | undefined,
  ): void {
    const ring = this.ring!;
    if (!this.feed.live) return;
    const hash = RecordRing.hash(held);
    this.sketch.incrementHash(hash);
    const victim = ring.victim(RING_ROOM_BYTES);
    if (victim !== undefined && this.sketch.frequencyOfHash(hash) <= this.sketch.frequencyOfHash(victim)) {
      this.stats.refused += 1;
      return;
    }
    if (!this.unchangedSince(ticket, tags, seen)) return;
    ring.set(held, value === null ? '' : compact.encode(value), besidesKey(tags, held), hash);
  }

  /** The read-through every caller uses: hits from the cache, misses loaded together and stored with their tags. */
  async throughMany<V>(declared: CachedRead<V>, keys: readonly string[], reads?: ReadSet): Promise<(V | null)[]> {
    const results: (V | null | undefined)[] = keys.map((key) => {
      const value = this.lookUpCounted(declared, key, reads);
      return value === MISS ? undefined : value;
    });
    const misses = keys.filter((_, i) => results[i] === undefined);
    if (misses.length === 0) return results as (V | null)[];
    const values = await this.fill(declared, misses, reads);
    return keys.map((key, i) => (results[i] !== undefined ? results[i] : values.get(key)!));
  }

  /** The misses of `throughMany` or `through`: loaded, shared or read again as the rules say, and stored. */
  private async fill<V>(
    declared: CachedRead<V>,
    misses: string[],
    reads: ReadSet | undefined,
  ): Promise<Map<string, V | null>> {
    const { namespace, load, tags, compact, share, amend, via } = declared;
    // Each value is recorded as current as of its read's ticket and snapshot, a shared one as of this call.
    const called: TagRead = { epoch: this.epoch };
    const record = (key: string, value: V | null, read: TagRead) => reads?.add(tags(key, value), read);
    const read =
      namespace === ''
        ? (keysRead: string[]) => this.readNow(load, keysRead, via)
        : (keysRead: string[]) => this.batched(namespace, load, keysRead);
    const store = (key: string, value: V | null, ticket: CacheTicket, seen: Snapshot | undefined) => {
      const held = keyIn(namespace, key);
      if (compact && this.ring) return this.storeRecord(ticket, held, value, compact, tags(key, value), seen);
      if (!this.admits(held)) return;
      this.set(ticket, held, value, tags(key, value), seen, amend as Amend<unknown> | undefined);
    };
    const ticket = this.ticket();
    const joined = new Map<string, Promise<{ value: V | null } | undefined>>();
    if (share) {
      for (const key of misses) {
        const running = this.join<V | null>(keyIn(namespace, key), tags(key, null), (value) => tags(key, value));
        if (running) joined.set(key, running);
      }
    }
    const own = joined.size === 0 ? misses : misses.filter((key) => !joined.has(key));
    const reading = own.length > 0 ? read(own) : undefined;
    if (reading && share) {
      for (const key of own)
        this.track(
          keyIn(namespace, key),
          ticket,
          reading.then(({ rows, seen }) => ({ value: rows.get(key) ?? null, seen })),
        );
    }
    const values = new Map<string, V | null>();
    if (reading) {
      const { rows, seen } = await reading;
      for (const key of own) {
        const value = rows.get(key) ?? null;
        store(key, value, ticket, seen);
        record(key, value, { epoch: ticket.epoch, seen });
        values.set(key, value);
      }
    }
    for (const [key, running] of joined) {
      const shared = await running;
      if (shared) {
        record(key, shared.value, called);
        values.set(key, shared.value);
        continue;
      }
      // The shared read may have missed a change announced before this caller came: read again.
      const retryTicket = this.ticket();
      const { rows, seen } = await read([key]);
      const value = rows.get(key) ?? null;
      store(key, value, retryTicket, seen);
      record(key, value, { epoch: retryTicket.epoch, seen });
      values.set(key, value);
    }
    return values;
  }

  private async readNow<V>(
    load: CachedRead<V>['load'],
    keys: string[],
    via?: Pick<SqlDriver, 'query'>,
  ): Promise<{ rows: Map<string, V>; seen: Snapshot | undefined }> {
    const { query, seen } = snapshotQuery(via ?? this.sql);
    const rows = await load(keys, query);
    return { rows, seen: seen() };
  }

  /**
   * `readNow` for the misses of every request in this turn of the event loop, in one statement. The
   * read starts after every caller's ticket was taken, so the snapshot rule holds for each.
   */
  private async batched<V>(
    namespace: string,
    load: CachedRead<V>['load'],
    keys: string[],
  ): Promise<{ rows: Map<string, V>; seen: Snapshot | undefined }> {
    let batch = this.batches.get(namespace);
    if (batch === undefined) {
      batch = new DataLoader<string, BatchedValue>(
        async (asked) => {
          const unique = asked.length > 1 ? [...new Set(asked)] : (asked as string[]);
          const { rows, seen } = await this.readNow(load, unique);
          return asked.map((key) => ({ value: rows.get(key), seen }));
        },
        // Once the turn's callbacks (every request whose bytes arrived in it) have asked.
        { cache: false, maxBatchSize: BATCH_MAX_KEYS, batchScheduleFn: (run) => setImmediate(run) },
      );
      this.batches.set(namespace, batch);
    }
    const values = await Promise.all(keys.map((key) => batch.load(key)));
    const rows = new Map<string, V>();
    let seen = values[0]?.seen;
    values.forEach(({ value, seen: its }, i) => {
      if (value !== undefined) rows.set(keys[i]!, value as V);
      // Keys read by two statements (past the batch's bound) saw no one snapshot.
      if (its !== seen) seen = undefined;
    });
    return { rows, seen };
  }

  /** A value computed from what a request read through the cache (an answer many callers share). */
  computed<V>(key: string): V | undefined {
    const value = this.lookUpCounted(COMPUTED as CachedLookup<V>, key, undefined);
    return value === MISS || value === null ? undefined : value;
  }

  /** Holds `value` with the tags of what it read, unless it read around the cache or something it read changed. */
  keepComputed(key: string, value: unknown, reads: ReadSet): void {
    if (reads.untracked || !this.unchangedSinceRead(reads.tags) || !this.admits(key)) return;
    this.store(key, { value, tags: besidesKey([...reads.tags.keys()], key) });
  }

  through<V>(key: string, declared: CachedValue<V>, reads?: ReadSet): Promise<V> {
    const { tags, read, usable, compact } = declared;
    const lookup: CachedLookup<V> = {
      namespace: '',
      tags: typeof tags === 'function' ? (_key, value) => (value === null ? [] : tags(value)) : () => tags,
      usable,
      compact,
    };
    const held = this.lookUpCounted<V>(lookup, key, reads);
    if (held !== MISS) return Promise.resolve(held as V);
    const load = async (_misses: string[], query: SnapshotQuery) => new Map([[key, await read(query)]]);
    return this.fill<V>(
      { ...lookup, load, share: declared.share, amend: declared.amend, via: declared.via },
      [key],
      reads,
    ).then((values) => values.get(key) as V);
  }

  /** A read of `key` in flight that this caller may use: not one that may predate a change it knows of. */
  private join<V>(
    key: string,
    tags: readonly string[],
    tagsOf?: (value: V) => readonly string[],
  ): Promise<{ value: V } | undefined> | undefined {
    const running = this.reads.get(key);
    if (!running) return undefined;
    const clean = this.unchangedSince(running, tags);
    this.stats.sharedReads += 1;
    return running.result.then((read) => {
      // Tags known only from the value read are checked now: on the safe side.
      const more = tagsOf ? tagsOf(read.value as V).filter((tag) => !tags.includes(tag)) : [];
      const all = more.length === 0 ? tags : [...tags, ...more];
      const fresh =
        (clean && (more.length === 0 || this.unchangedSince(running, more))) ||
        this.unchangedSince(running, all, read.seen);
      return fresh ? { value: read.value as V } : undefined;
    });
  }

  /** Offers a read of `key`, started after `ticket` was taken, to callers arriving while it runs. */
  private track(key: string, ticket: CacheTicket, result: Promise<{ value: unknown; seen?: Snapshot }>): void {
    const running: RunningRead = { epoch: ticket.epoch, result };
    this.reads.set(key, running);
    const done = () => {
      if (this.reads.get(key) === running) this.reads.delete(key);
    };
    result.then(done, done);
  }

  /** Whether nothing that `reads` read was invalidated after it was read by a change it did not see (see `ReadSet`). */
  private unchangedSinceRead(reads: ReadonlyMap<string, TagRead>): boolean {
    for (const [tag, read] of reads) if (!this.unchangedSince(read, [tag], read.seen)) return false;
    return true;
  }

  /** Whether none of `tags` was invalidated since `ticket`, other than by changes a read with `seen` saw. */
  private unchangedSince(ticket: CacheTicket, tags: readonly string[], seen?: Snapshot): boolean {
    if (ticket.epoch < this.clearedAt || ticket.epoch < this.forgottenUpTo) return false;
    for (const tag of tags) {
      const last = this.invalidatedAt.peek(tag);
      if (last === undefined || last.epoch <= ticket.epoch) continue;
      if (seen === undefined || last.version === undefined || !sees(seen, last.version)) return false;
    }
    return true;
  }

  /** One announced change: every entry carrying a tag it drops goes, unless its read saw it or it amends. */
  private onChange(change: Change): void {
    this.stats.announcements += 1;
    if (change.kind === 'all') {
      this.clear();
      return;
    }
    const now = this.now();
    const amended = new Set<string>();
    for (const tag of droppedBy(change, now)) {
      this.epoch += 1;
      this.invalidatedAt.set(tag, { epoch: this.epoch, version: change.version });
      this.stats.invalidations += 1;
      // A tag spelled as a key names that entry; in the ring, records go whether or not their read saw
      // the change (a record keeps no snapshot).
      this.ring?.delete(tag);
      this.ring?.invalidate(tag);
      this.dropOrAmend(tag, change, now, amended);
      for (const key of this.byTag.keys(tag)) this.dropOrAmend(key, change, now, amended);
    }
  }

  /** Drops the entry of `key`, unless it saw the change or its declaration amends it (once a change: `amended`). */
  private dropOrAmend(key: string, change: RowChange, now: number, amended: Set<string>): void {
    const entry = this.entries?.peek(key);
    if (entry === undefined || amended.has(key)) return;
    const { version } = change;
    if (version !== undefined && entry.seen !== undefined && sees(entry.seen, version)) return;
    const value = entry.amend ? entry.amend(entry.value, change, now) : undefined;
    if (value === undefined) {
      this.entries!.delete(key);
      return;
    }
    this.store(key, { ...entry, value });
    amended.add(key);
  }

  clear(): void {
    this.epoch += 1;
    this.clearedAt = this.epoch;
    this.entries?.clear();
    this.ring?.clear();
    this.byTag.clear();
  }

  close(): void {
    this.unsubscribe();
    this.clear();
  }
}
