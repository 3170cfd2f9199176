import { fnv1a } from './string-hash.js';

/*
 * Cached values as bytes in one ring rather than as objects on the V8 heap, so that the entity cache
 * holds a large population: a user takes about 510 bytes here against 1 KB as objects, and garbage
 * collection does not walk it. First in, first out; a record is found by its key's hash; a tag
 * invalidated makes every record carrying it stale at once (a generation count).
 */

/** A record's header: hash, length, tag set, its generation, written at, key bytes, then key and value. */
const HEADER_BYTES = 24;
const OFFSET = { hash: 0, length: 4, tagSet: 8, generation: 12, writtenAt: 16, keyBytes: 20 } as const;
/** Key bytes of a padding record (the gap left at the end of the buffer when a record did not fit). */
const PADDING = 0xffff;
const align = (bytes: number) => (bytes + 7) & ~7;

/** The index's part of the ring's bytes, for records of about 170 bytes on average. */
const INDEX_SHARE = 0.06;
/** The most bytes a ring holds: offsets are 32-bit, and Node 20's `Buffer#write` fails past 2^31. */
export const RING_MAX_BYTES = 2 ** 31 - 1;

/** Of an explicit CACHE_MAX_BYTES, the records' part; the rest is the cache's entries, on the heap. */
export const RECORDS_SHARE = 0.85;
const SLOT_BYTES = 8;
/** The index's slots at most in use (open addressing stays short-probed below it). */
const INDEX_LOAD = 0.75;

/** What the index holds per record besides its bytes: its slot, at the index's load. */
export const RING_INDEX_BYTES = SLOT_BYTES / INDEX_LOAD;

/**
 * Key hash → record offset, open-addressed in two typed arrays (linear probing, backward-shift
 * deletion): about 11 bytes a record and nothing for the garbage collector to walk.
 */
export class OffsetIndex {
  private readonly hashes: Int32Array;
  /** The record's offset plus one; 0: an empty slot. */
  private readonly offsets: Uint32Array;
  size = 0;
  readonly maxSize: number;

  constructor(readonly slots: number) {
    this.hashes = new Int32Array(slots);
    this.offsets = new Uint32Array(slots);
    this.maxSize = Math.floor(slots * INDEX_LOAD);
  }

  private home(hash: number): number {
    return (hash >>> 0) % this.slots;
  }

  private next(slot: number): number {
    return slot + 1 === this.slots ? 0 : slot + 1;
  }

  private find(hash: number): number {
    const { hashes, offsets } = this;
    for (let slot = this.home(hash); ; slot = this.next(slot)) {
      if (offsets[slot] === 0) return -1;
      if (hashes[slot] === hash) return slot;
    }
  }

  get(hash: number): number | undefined {
    if (this.size === 0) return undefined;
    const slot = this.find(hash);
    return slot === -1 ? undefined : this.offsets[slot]! - 1;
  }

  /** Sets the offset of `hash` (the caller keeps the size within `maxSize`). */
  set(hash: number, at: number): void {
    const { hashes, offsets } = this;
    let slot = this.home(hash);
    while (offsets[slot] !== 0 && hashes[slot] !== hash) slot = this.next(slot);
    if (offsets[slot] === 0) this.size += 1;
    hashes[slot] = hash;
    offsets[slot] = at + 1;
  }

  delete(hash: number): void {
    if (this.size === 0) return;
    let hole = this.find(hash);
    if (hole === -1) return;
    this.size -= 1;
    const { hashes, offsets } = this;
    // Later slots of the same probe run move back into the hole, unless their home lies
    // cyclically after it (they would no longer be found from there).
    for (let slot = this.next(hole); offsets[slot] !== 0; slot = this.next(slot)) {
      const home = this.home(hashes[slot]!);
      const stays = hole <= slot ? hole < home && home <= slot : hole < home || home <= slot;
      if (stays) continue;
      hashes[hole] = hashes[slot]!;
      offsets[hole] = offsets[slot]!;
      hole = slot;
    }
    offsets[hole] = 0;
  }

  clear(): void {
    this.offsets.fill(0);
    this.size = 0;
  }
}

/** Tags shared by many records (an organization's), interned: invalidating one makes its records stale. */
type TagSet = { id: number; key: string; tags: readonly string[]; holders: number; generation: number };

export class RecordRing {
  private readonly buffer: Buffer;
  /** Key hash → offset of the newest record under it (a hash shared by two keys keeps the newer). */
  private readonly index: OffsetIndex;
  /** Positions grow without end (the offset is the position modulo the capacity). */
  private writeAt = 0;
  private readAt = 0;
  private readonly tagSets = new Map<string, TagSet>();
  private readonly tagSetsById = new Map<number, TagSet>();
  private readonly tagSetsByTag = new Map<string, TagSet[]>();
  private nextTagSet = 1;
  private readonly born = Date.now();

  /** `bytes`: the buffer, index and tag sets in all; `ttlMs`: a safety net, as the cache's own. */
  constructor(
    bytes: number,
    private readonly ttlMs: number,
  ) {
    bytes = Math.min(bytes, RING_MAX_BYTES);
    const slots = Math.max(0, Math.floor((bytes * INDEX_SHARE) / SLOT_BYTES));
    const capacity = Math.max(0, Math.floor((bytes - slots * SLOT_BYTES) / 8) * 8);
    this.buffer = Buffer.allocUnsafeSlow(capacity);
    this.index = new OffsetIndex(slots);
  }

  get maxRecords(): number {
    return this.index.maxSize;
  }

  get size(): number {
    return this.index.size;
  }

  /** Bytes of the buffer in use (live and dead records between the oldest and the newest). */
  get usedBytes(): number {
    return this.writeAt - this.readAt;
  }

  get capacity(): number {
    return this.buffer.length;
  }

  /** The hash a key is found by (also what the frequency sketch counts the key under). */
  static hash(key: string): number {
    return fnv1a(key);
  }

  /** The value stored under `key`, unless it is absent, expired, or a tag it carries was invalidated since. */
  get(key: string, hash = RecordRing.hash(key)): string | undefined {
    const at = this.index.get(hash);
    if (at === undefined) return undefined;
    const buffer = this.buffer;
    const keyBytes = buffer.readUInt16LE(at + OFFSET.keyBytes);
    const keyStart = at + HEADER_BYTES;
    if (!this.keyIs(key, keyStart, keyBytes)) return undefined;
    if (!this.current(at)) {
      this.unlink(hash, at);
      return undefined;
    }
    return buffer.toString('utf8', keyStart + keyBytes, at + buffer.readUInt32LE(at + OFFSET.length));
  }

  /** The hash of the record storing `bytes` more would push out first, or undefined while they fit. */
  victim(bytes: number): number | undefined {
    if (!this.short(bytes, true)) return undefined;
    const oldest = this.oldestHeld();
    return oldest === undefined || !this.short(bytes, true) ? undefined : this.buffer.readInt32LE(oldest + OFFSET.hash);
  }

  /** Bytes held: the buffer's records between the oldest and the newest, and the index. */
  get bytes(): number {
    return this.usedBytes + this.index.size * RING_INDEX_BYTES;
  }

  /** Drops the oldest records until at most `bytes` are held (memory pressure). */
  shrinkTo(bytes: number): void {
    this.dropOldestWhile(() => this.bytes > bytes);
  }

  /** Stores `value` under `key` with its `tags`, the oldest records going to make room; false when it cannot fit. */
  set(key: string, value: string, tags: readonly string[], hash = RecordRing.hash(key)): boolean {
    const keyBytes = Buffer.byteLength(key);
    const valueBytes = Buffer.byteLength(value);
    const length = HEADER_BYTES + keyBytes + valueBytes;
    const capacity = this.capacity;
    if (keyBytes >= PADDING || align(length) > capacity || this.maxRecords === 0) return false;
    // The record under this hash goes first (this key's, or another's: a cache may forget), before
    // the new one takes its tag set, which that record may have been the last to hold.
    const before = this.index.get(hash);
    if (before !== undefined) this.unlink(hash, before);
    let at = this.writeAt % capacity;
    if (at + align(length) > capacity) {
      // The record does not fit before the end: the gap is skipped, a padding record when it has room for one.
      const gap = capacity - at;
      this.makeRoom(gap, false);
      if (gap >= HEADER_BYTES) {
        this.buffer.writeUInt32LE(gap, at + OFFSET.length);
        this.buffer.writeUInt16LE(PADDING, at + OFFSET.keyBytes);
      }
      this.writeAt += gap;
      at = 0;
    }
    this.makeRoom(align(length), true);
    const set = tags.length === 0 ? undefined : this.tagSet(tags);
    const buffer = this.buffer;
    buffer.writeInt32LE(hash, at + OFFSET.hash);
    buffer.writeUInt32LE(length, at + OFFSET.length);
    buffer.writeUInt32LE(set?.id ?? 0, at + OFFSET.tagSet);
    buffer.writeUInt32LE(set?.generation ?? 0, at + OFFSET.generation);
    buffer.writeUInt32LE(this.seconds(), at + OFFSET.writtenAt);
    buffer.writeUInt16LE(keyBytes, at + OFFSET.keyBytes);
    buffer.write(key, at + HEADER_BYTES, keyBytes, 'utf8');
    buffer.write(value, at + HEADER_BYTES + keyBytes, valueBytes, 'utf8');
    this.writeAt += align(length);
    this.index.set(hash, at);
    if (set) set.holders += 1;
    return true;
  }

  delete(key: string, hash = RecordRing.hash(key)): void {
    const at = this.index.get(hash);
    if (at !== undefined && this.keyIs(key, at + HEADER_BYTES, this.buffer.readUInt16LE(at + OFFSET.keyBytes)))
      this.unlink(hash, at);
  }

  /** Every record carrying `tag` (in its tag set) is stale from now on. */
  invalidate(tag: string): void {
    const sets = this.tagSetsByTag.get(tag);
    if (sets) for (const set of sets) set.generation = (set.generation + 1) >>> 0;
  }

  clear(): void {
    this.index.clear();
    this.tagSets.clear();
    this.tagSetsById.clear();
    this.tagSetsByTag.clear();
    this.writeAt = 0;
    this.readAt = 0;
  }

  /** Advances the oldest position until `bytes` more fit (and, for a record, the index has room). */
  private makeRoom(bytes: number, record: boolean): void {
    this.dropOldestWhile(() => this.short(bytes, record));
  }

  /** Whether `bytes` more do not fit without dropping a record (or, for a record, the index is full). */
  private short(bytes: number, record: boolean): boolean {
    return this.writeAt + bytes - this.readAt > this.capacity || (record && this.index.size >= this.maxRecords);
  }

  /** Drops the oldest records while `short` says so. */
  private dropOldestWhile(short: () => boolean): void {
    while (short()) {
      const at = this.oldestHeld();
      if (at === undefined || !short()) return;
      this.unlink(this.buffer.readInt32LE(at + OFFSET.hash), at);
      this.readAt += align(this.buffer.readUInt32LE(at + OFFSET.length));
    }
  }

  /**
   * The offset of the oldest record still served, dropping the expired or stale ones on the way, so
   * that admission never weighs a new record against one that would not be served.
   */
  private oldestHeld(): number | undefined {
    const capacity = this.capacity;
    while (this.readAt < this.writeAt) {
      const at = this.readAt % capacity;
      if (capacity - at < HEADER_BYTES) {
        this.readAt += capacity - at;
        continue;
      }
      const hash = this.buffer.readInt32LE(at + OFFSET.hash);
      if (this.buffer.readUInt16LE(at + OFFSET.keyBytes) !== PADDING && this.index.get(hash) === at) {
        if (this.current(at)) return at;
        this.unlink(hash, at);
      }
      this.readAt += align(this.buffer.readUInt32LE(at + OFFSET.length));
    }
    return undefined;
  }

  /** Takes the record at `at` out of the index, and out of its tag set's holders. */
  private unlink(hash: number, at: number): void {
    this.index.delete(hash);
    const id = this.buffer.readUInt32LE(at + OFFSET.tagSet);
    if (id === 0) return;
    const set = this.tagSetsById.get(id);
    if (set === undefined || --set.holders > 0) return;
    this.tagSets.delete(set.key);
    this.tagSetsById.delete(id);
    for (const tag of set.tags) {
      const sets = this.tagSetsByTag.get(tag)!;
      if (sets.length === 1) this.tagSetsByTag.delete(tag);
      else sets.splice(sets.indexOf(set), 1);
    }
  }

  /** Whether the record at `at` is neither expired nor stale by its tags. */
  private current(at: number): boolean {
    if (this.seconds() - this.buffer.readUInt32LE(at + OFFSET.writtenAt) > this.ttlMs / 1000) return false;
    const id = this.buffer.readUInt32LE(at + OFFSET.tagSet);
    if (id === 0) return true;
    return this.tagSetsById.get(id)?.generation === this.buffer.readUInt32LE(at + OFFSET.generation);
  }

  private tagSet(tags: readonly string[]): TagSet {
    const key = tags.join('\n');
    let set = this.tagSets.get(key);
    if (set === undefined) {
      while (this.tagSetsById.has(this.nextTagSet))
        this.nextTagSet = this.nextTagSet >= 0xfffffffe ? 1 : this.nextTagSet + 1;
      set = { id: this.nextTagSet, key, tags: [...tags], holders: 0, generation: 0 };
      this.nextTagSet = this.nextTagSet >= 0xfffffffe ? 1 : this.nextTagSet + 1;
      this.tagSets.set(key, set);
      this.tagSetsById.set(set.id, set);
      for (const tag of set.tags) {
        const sets = this.tagSetsByTag.get(tag);
        if (sets) sets.push(set);
        else this.tagSetsByTag.set(tag, [set]);
      }
    }
    return set;
  }

  /** Whether the key bytes at `start` spell `key`. */
  private keyIs(key: string, start: number, bytes: number): boolean {
    const buffer = this.buffer;
    if (bytes === key.length) {
      let ascii = true;
      for (let i = 0; i < bytes; i++) {
        const code = key.charCodeAt(i);
        if (code >= 0x80) {
          ascii = false;
          break;
        }
        if (buffer[start + i] !== code) return false;
      }
      if (ascii) return true;
    }
    return buffer.toString('utf8', start, start + bytes) === key && Buffer.byteLength(key) === bytes;
  }

  private seconds(): number {
    return Math.floor((Date.now() - this.born) / 1000);
  }
}
