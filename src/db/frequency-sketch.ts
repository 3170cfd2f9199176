import { fnv1a } from './string-hash.js';

/**
 * How often each key was asked for lately, approximately, in fixed memory: TinyLFU's count-min
 * sketch (as Caffeine and Ristretto keep it). Four counters a key, in four rows, each counter
 * saturating at 15; the estimate is the least of a key's four, so collisions only ever raise it.
 * Every `10 × width` increments all counters halve, so that what was asked for long ago fades.
 *
 * The entity cache asks it whether a new entry may take the place of the one it would evict
 * (`admits`): a key asked for once does not push out a key asked for often, and under a
 * population larger than the cache, entries stay in place instead of being filled and evicted on
 * every request.
 */
export class FrequencySketch {
  private readonly counters: Uint8Array;
  private readonly mask: number;
  private readonly sampleSize: number;
  private increments = 0;
  /** The counters of the key last located, one a row (kept, not made a call: this runs on every lookup). */
  private readonly at = new Int32Array(4);

  /** Bytes held: what the cache's byte bound sets aside for it. */
  readonly bytes: number;

  /** `expected`: about how many distinct keys the cache holds (the width is the next power of two, within bounds). */
  constructor(expected: number) {
    const width = 2 ** Math.ceil(Math.log2(Math.min(Math.max(expected, 1024), 1 << 18)));
    this.mask = width - 1;
    this.counters = new Uint8Array(width * 4);
    this.sampleSize = width * 10;
    this.bytes = this.counters.byteLength;
  }

  /** One more ask for `key`. */
  increment(key: string): void {
    this.incrementHash(fnv1a(key));
  }

  /** `increment` of a key by its FNV-1a hash (what a record ring finds it by). */
  incrementHash(hash: number): void {
    this.locate(hash);
    let added = false;
    for (let row = 0; row < 4; row++) {
      const at = this.at[row]!;
      if (this.counters[at]! < 15) {
        this.counters[at]! += 1;
        added = true;
      }
    }
    if (added && ++this.increments >= this.sampleSize) this.age();
  }

  /** About how many times `key` was asked for lately (0 to 15). */
  frequency(key: string): number {
    return this.frequencyOfHash(fnv1a(key));
  }

  /** `frequency` of a key by its FNV-1a hash. */
  frequencyOfHash(hash: number): number {
    this.locate(hash);
    let least = 15;
    for (let row = 0; row < 4; row++) least = Math.min(least, this.counters[this.at[row]!]!);
    return least;
  }

  /** Whether `candidate` was asked for more often than `victim`: worth its place. */
  admits(candidate: string, victim: string): boolean {
    return this.frequency(candidate) > this.frequency(victim);
  }

  private age(): void {
    for (let i = 0; i < this.counters.length; i++) this.counters[i]! >>= 1;
    this.increments = 0;
  }

  /** Where a key's four counters are (`at`), from its FNV-1a hash and a second mix of it, one a row. */
  private locate(h: number): void {
    let g = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    g = Math.imul(g ^ (g >>> 13), 0xc2b2ae35);
    const h1 = h >>> 0;
    const h2 = ((g ^ (g >>> 16)) | 1) >>> 0;
    const width = this.mask + 1;
    for (let row = 0; row < 4; row++) this.at[row] = row * width + ((h1 + row * h2) & this.mask);
  }
}
