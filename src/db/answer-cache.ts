import { LRUCache } from 'lru-cache';
import type { EntityCache } from './entity-cache.js';
import type { TagRead } from './read-set.js';
import { TagIndex } from './tag-index.js';
import { fnv1a } from './string-hash.js';
import { FrequencySketch } from './frequency-sketch.js';

/**
 * A whole answer, kept as the bytes sent: what a request computed from the entity cache's entries,
 * kept while none of them changed (see `AnswerCache`).
 */
export type Answer = {
  readonly body: Buffer;
  /** The request record's operation label, for its log line and metrics. */
  readonly label: string | undefined;
  /** Organizations whose details the answer shows: each serving counts a retrieval (decisions §3). */
  readonly retrievals: readonly string[];
  /** Epoch milliseconds until which what the answer computed from the clock holds. */
  readonly validUntil: number;
  /** The body's entity tag, made the first time a revalidatable answer needs it. */
  etag?: string;
};

type Entry = { answer: Answer; tags: readonly string[] };

export type AnswerCacheOptions = {
  /** Estimated bytes kept at most (bodies, keys, tags); the least recently used go first. 0: off. */
  maxBytes: number;
  /** A safety net only, as the entity cache's. */
  ttlMs: number;
  /**
   * Whether answers may also hold what the entity cache's entries leave unused of their bound,
   * giving it back as the entries grow: the two together never hold more than both bounds. Set
   * when both bounds are the memory budget's shares, not ones an operator set.
   */
  borrowSpareEntries?: boolean;
};

/** The cache's own bytes per entry (its LRU slot, the entry and answer objects, the buffer's header). */
const ENTRY_OVERHEAD_BYTES = 320;
/** Bytes per tag an entry carries: its string in the entry and its place in the tag index. */
const TAG_BYTES = 96;
/** About the least an answer is estimated at (a small body, its key and tags): what sizes the frequency sketch. */
const SMALL_ANSWER_BYTES = 1024;
/** A key longer than this (large variables) is not kept: the bytes are better spent on answers. */
export const MAX_ANSWER_KEY_LENGTH = 2048;

/**
 * Keys asked for recently: an answer is kept only for a key asked for before, so that answers
 * asked for once cost neither memory nor the evictions of answers asked for again. 32-bit
 * fingerprints in a fixed table, a later key replacing an earlier one in its slot: no allocation
 * and no list upkeep per request (why not an LRU list: `test/bench/README.md`, "Figures behind
 * the design"). Two keys with one fingerprint keep an answer one request early, never serve one
 * to another key.
 */
export class AskedKeys {
  private readonly slots: Int32Array;

  constructor(size: number) {
    // A power of two, so that a slot is the fingerprint's low bits.
    this.slots = new Int32Array(2 ** Math.ceil(Math.log2(Math.max(1, size))));
  }

  /** Whether `key` was asked for since its slot last changed; remembers it either way. */
  ask(key: string): boolean {
    // Never 0 (an empty slot).
    const hash = fnv1a(key);
    const fingerprint = hash | 1;
    const slot = (hash >>> 1) & (this.slots.length - 1);
    if (this.slots[slot] === fingerprint) return true;
    this.slots[slot] = fingerprint;
    return false;
  }

  clear(): void {
    this.slots.fill(0);
  }
}

/** A claim answered by a kept answer (at once, or once another caller's was kept). */
type Answered = { answer: Answer; computation?: undefined; readAgain?: undefined };

/** What `AnswerCache.claim` gives a caller missing a key: an answer, or the computation it makes. */
type Claim = Answered | { answer?: undefined; computation: Computation; readAgain: boolean };

/**
 * What serving needs of a request's context: what it read so far (and whether an answer made of it
 * may be kept at all: nothing read around the cache, nothing past its time), and its viewer's key.
 */
export type ServingContext = {
  readonly reads: { readonly tags: ReadonlyMap<string, TagRead>; reusable(now: number): boolean };
  viewerKey(): Promise<string | undefined>;
};

/**
 * Keeps a computed answer (made by `answer` only when it will be kept) under the request's key, or
 * the one `name` gives when the request's was not known before computing (asked only when what
 * the computation read may be kept), unless what it read changed after it was read. Returns the
 * answer kept.
 */
export type Keep = (answer: () => Answer, name?: () => string | undefined) => Answer | undefined;

export type ServeRequest<C extends ServingContext> = {
  /** The answer's key, when known before computing; undefined: named by `keep`, if at all. */
  key: string | undefined;
  /**
   * The key of the viewer the request's credentials name (or of the readers its answer is shared
   * by, see `viewerOf`); undefined: nothing is kept or shared.
   */
  viewer: string | undefined;
  /** `viewer` for a context verified again; the context's `viewerKey` unless said. */
  viewerOf?: (context: C) => Promise<string | undefined>;
  context: C;
  /** A new context, verified again: for a request whose credentials changed while it waited. */
  fresh: () => C;
  now: () => number;
};

const NOTHING_READ: ReadonlyMap<string, TagRead> = new Map();

/** Computations of one key a caller waits for in turn before it computes the answer itself. */
const MAX_WAITS = 8;

/** Slots of the table of asked keys (16 KiB), as many as the keys the list before it kept. */
const KEYS_REMEMBERED = 4096;

/** An answer of these bytes, in memory of its own (not a slice of a pool slab that it would keep whole). */
export function answerOf(text: string, kept: Omit<Answer, 'body' | 'etag'>): Answer {
  const body = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  body.write(text);
  return { body, ...kept };
}

/** An answer being computed, which callers missing the same key meanwhile may wait for. */
type Computation = {
  /**
   * Ends the computation, and gives the answer to keep (made by `answer` only when it will be kept)
   * under the key begun with (or `key`, for a computation begun before its key was known), unless
   * something it read (`reads`: each tag with the cache's epoch when it was read) changed after it
   * was read. Returns the answer kept.
   */
  finish(answer: (() => Answer) | undefined, reads: ReadonlyMap<string, TagRead>, key?: string): Answer | undefined;
};

/**
 * Whole answers by key (the request's operation, variables and viewer), kept while every entity
 * cache tag they were computed from is unchanged, and shared by callers missing the same key at
 * once. The rules: `src/db/README.md`, "GraphQL answers kept whole".
 */
export class AnswerCache {
  private readonly entries: LRUCache<string, Entry> | undefined;
  private readonly index = new TagIndex();
  private readonly running = new Map<string, Promise<Answer | undefined>>();
  private readonly asked = new AskedKeys(KEYS_REMEMBERED);
  /** How often keys were asked for lately: whether a new answer may evict the least recently used (`admits`). */
  private readonly sketch: FrequencySketch | undefined;
  /** The bytes of the answers' own bound (without what they may borrow). */
  private readonly ownBytes: number = 0;
  private readonly borrows: boolean;
  private readonly unlisten: () => void;
  readonly stats = { hits: 0, misses: 0, shared: 0, stored: 0, firstAsked: 0, refused: 0, dropped: 0, evictions: 0 };

  constructor(
    private readonly cache: EntityCache,
    options: AnswerCacheOptions,
  ) {
    this.borrows = options.borrowSpareEntries === true && options.maxBytes > 0;
    const borrowable = this.borrows ? cache.entryBytesBound : 0;
    if (options.maxBytes > 0) {
      // The sketch's counters take their part of the bound (4 KiB to 1 MiB; 64 KiB at the default
      // budget, sized for the answers that fit in what may be borrowed too).
      this.sketch = new FrequencySketch((options.maxBytes + borrowable) / SMALL_ANSWER_BYTES);
      this.ownBytes = Math.max(1, options.maxBytes - this.sketch.bytes);
      this.entries = new LRUCache<string, Entry>({
        maxSize: this.ownBytes + borrowable,
        sizeCalculation: (entry, key) =>
          ENTRY_OVERHEAD_BYTES + entry.answer.body.length + 2 * key.length + TAG_BYTES * entry.tags.length,
        ttl: options.ttlMs,
        dispose: (entry, key, reason) => {
          if (reason === 'evict') this.stats.evictions += 1;
          this.index.remove(key, entry.tags);
        },
      });
    }
    this.unlisten = cache.listen({
      invalidated: (tag) => {
        for (const key of this.index.keys(tag)) {
          this.stats.dropped += 1;
          this.entries?.delete(key);
        }
      },
      cleared: () => this.clear(),
      stored: this.borrows ? () => this.giveBack() : undefined,
    });
  }

  /**
   * The most bytes the answers may hold now: their own bound, and what the entity cache's entries leave
   * unused if they borrow it.
   */
  private limit(): number {
    return this.borrows ? this.ownBytes + this.cache.spareEntryBytes : this.ownBytes;
  }

  /**
   * Evicts the least recently used answers until they fit in what they may hold now (the entries grew, or an
   * answer was kept).
   */
  private giveBack(): void {
    const entries = this.entries;
    if (!entries) return;
    const limit = this.limit();
    while (entries.size > 0 && entries.calculatedSize > limit) entries.pop();
  }

  /** Whether answers are kept and served now. */
  get enabled(): boolean {
    return this.entries !== undefined && this.cache.live;
  }

  get size(): number {
    return this.entries?.size ?? 0;
  }

  /** Evicts the least recently used entries until at most `bytes` are held (memory pressure). */
  shrinkTo(bytes: number): void {
    while (this.entries && this.entries.size > 0 && this.entries.calculatedSize > bytes) this.entries.pop();
  }

  /** Estimated bytes held now. */
  get bytes(): number {
    return this.entries?.calculatedSize ?? 0;
  }

  /** The kept answer to `key` that still holds at `now`. */
  get(key: string, now: number): Answer | undefined {
    if (!this.enabled) return undefined;
    this.sketch!.increment(key);
    const answer = this.entries!.get(key)?.answer;
    if (answer === undefined || now >= answer.validUntil) {
      this.stats.misses += 1;
      return undefined;
    }
    this.stats.hits += 1;
    return answer;
  }

  /**
   * Serves one request, for both transports: `served` with the answer kept under its key (at
   * once, or once another request's computation kept one), else `compute` in the context to
   * compute in, with `keep` when its answer may be kept. While it computes, requests missing the
   * same key wait for it (see `claim`); a request whose credentials changed while it waited is
   * verified again in a new context, and keeps nothing unless they still name the same viewer.
   * The computation ends when `compute` settles, whatever it did.
   */
  async serve<C extends ServingContext, T>(
    request: ServeRequest<C>,
    served: (answer: Answer, context: C) => T | Promise<T>,
    compute: (context: C, keep: Keep | undefined) => Promise<T>,
  ): Promise<T> {
    const { key, viewer, now } = request;
    let context = request.context;
    let computation: Computation | undefined;
    let sameViewer = true;
    if (viewer !== undefined && key !== undefined) {
      const claiming = this.claim(key, now, context.reads.tags);
      const claimed = claiming instanceof Promise ? await claiming : claiming;
      if (claimed.answer) return served(claimed.answer, context);
      computation = claimed.computation;
      if (claimed.readAgain) {
        context = request.fresh();
        sameViewer = (await (request.viewerOf?.(context) ?? context.viewerKey())) === viewer;
      }
    } else if (viewer !== undefined) {
      // A key not known yet: nobody waits for this computation, and `keep` names it.
      computation = this.begin(undefined);
    }
    const own = computation;
    const reads = context.reads;
    const keep: Keep | undefined =
      own && sameViewer
        ? (answer, name) => (reads.reusable(now()) ? own.finish(answer, reads.tags, name?.()) : undefined)
        : undefined;
    try {
      return await compute(context, keep);
    } finally {
      own?.finish(undefined, NOTHING_READ);
    }
  }

  /**
   * For a caller missing `key`: the kept answer that holds now, or the one another caller's
   * computation kept meanwhile; otherwise the computation this caller makes, begun, so that
   * others wait for it. A computation that could not keep its answer hands the key on to one
   * waiter (README, "Shared misses"); a caller waits for at most `MAX_WAITS` in turn. `readAgain`:
   * what the caller read before (`before`, its credentials) changed while it waited, so an answer
   * made from it could not be kept. A kept answer is given at once, not as a promise: a hit is
   * most requests.
   */
  private claim(key: string, now: () => number, before?: ReadonlyMap<string, TagRead>): Answered | Promise<Claim> {
    const kept = this.get(key, now());
    return kept ? { answer: kept } : this.waitOrBegin(key, now, before);
  }

  private async waitOrBegin(
    key: string,
    now: () => number,
    before: ReadonlyMap<string, TagRead> | undefined,
  ): Promise<Claim> {
    for (let waits = 0; ; waits++) {
      const running = this.running.get(key);
      // Checked and begun in one step: the waiters of a computation that ended resume one by one.
      if (running === undefined || waits === MAX_WAITS || !this.enabled) {
        return {
          computation: this.begin(key),
          readAgain: waits > 0 && before !== undefined && !this.cache.unchangedSinceRead(before),
        };
      }
      this.stats.shared += 1;
      const shared = await running;
      if (shared && now() < shared.validUntil) return { answer: shared };
    }
  }

  /**
   * Begins computing an answer: callers missing `key` meanwhile wait for this one. Without a key
   * (not known yet), nobody waits, and `finish` names it.
   */
  private begin(key: string | undefined): Computation {
    let settle: ((answer: Answer | undefined) => void) | undefined;
    const own = key !== undefined && !this.running.has(key) && key.length <= MAX_ANSWER_KEY_LENGTH;
    if (own) this.running.set(key, new Promise<Answer | undefined>((resolve) => (settle = resolve)));
    let finished = false;
    return {
      finish: (answer, reads, named = key) => {
        if (finished) return undefined;
        finished = true;
        if (own) this.running.delete(key);
        const kept = answer !== undefined && named !== undefined ? this.store(named, answer, reads) : undefined;
        settle?.(kept);
        return kept;
      },
    };
  }

  private store(key: string, make: () => Answer, reads: ReadonlyMap<string, TagRead>): Answer | undefined {
    if (!this.enabled || key.length > MAX_ANSWER_KEY_LENGTH) return undefined;
    // The key first: most misses of many users each asking rarely end here, before their reads are checked.
    if (!this.asked.ask(key)) {
      this.stats.firstAsked += 1;
      return undefined;
    }
    if (!this.cache.unchangedSinceRead(reads)) return undefined;
    if (!this.admits(key)) {
      this.stats.refused += 1;
      return undefined;
    }
    const tags = [...reads.keys()];
    const entry: Entry = { answer: make(), tags };
    this.entries!.set(key, entry);
    if (this.borrows) this.giveBack();
    // Larger than the whole bound (or than what may be held now): not kept.
    if (this.entries!.peek(key) !== entry) return undefined;
    this.index.add(key, tags);
    this.stats.stored += 1;
    return entry.answer;
  }

  /**
   * Whether an answer to `key` may be kept: always while there is room for one more answer of the
   * average size, and when the cache is full only if its key was asked for more often lately than
   * the least recently used answer's, which it would evict (TinyLFU's admission, as the entity
   * cache's). When more viewers ask than the answers held, the answers stay in place instead of
   * each request's being made, kept and evicted unread.
   */
  private admits(key: string): boolean {
    const entries = this.entries!;
    const average = entries.size === 0 ? 0 : entries.calculatedSize / entries.size;
    if (entries.calculatedSize + average <= this.limit() || entries.has(key)) return true;
    const victim = entries.rkeys().next();
    return victim.done === true || this.sketch!.admits(key, victim.value);
  }

  clear(): void {
    this.entries?.clear();
    this.index.clear();
    this.asked.clear();
  }

  close(): void {
    this.unlisten();
    this.clear();
  }
}
