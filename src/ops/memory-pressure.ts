import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import v8 from 'node:v8';
import { SHEDDING_THRESHOLDS } from './memory-budget.js';

/*
 * Refuse before running out (`ops/README.md`, "Memory budget"): as the live heap rises the caches
 * shrink, then new streams are refused, then requests are answered 503; a level is left a margin
 * below its threshold. The live heap is what the last full collection left (or the heap in use, if
 * less): the heap in use alone counts garbage, and before the first full collection nothing is refused.
 */

export type PressureLevel = 0 | 1 | 2 | 3;

/** The live heap's share of the old generation at which each level starts. */
const THRESHOLDS: readonly number[] = SHEDDING_THRESHOLDS;
/** A level is left this far below its threshold. */
const HYSTERESIS = 0.05;
const SAMPLE_MS = 100;
/** The part of the requests in progress one client address, or one credential, may hold. */
const CLIENT_PART = 1 / 4;

export type MemoryPressureOptions = {
  oldGenerationBytes: number;
  /** Level 1 is on: the caches shrink to this fraction of what they hold. */
  shrink: (fraction: number) => void;
  /** The requests in progress the budget's working reserve holds. */
  maxRequests: number;
  /** The live heap, as read after full collections (tests pass their own). */
  used?: () => number;
  /** The heap as V8 shows it (tests pass their own); `used` wins when both are given. */
  heap?: HeapReader;
};

/** The live heap and how many full collections it has seen. */
export type HeapReader = { read(): number; readonly collections: number };

/** The live heap as V8 shows it: what the last full collection kept, bounded by what is in use now. */
class LiveHeap implements HeapReader {
  /** The heap in use right after the last full collection; undefined before the first one. */
  private afterFull: number | undefined;
  /** Full collections seen: a reading is fresh when this moved. */
  collections = 0;
  private readonly observer = new PerformanceObserver((list) => {
    if (!list.getEntries().some(isFullCollection)) return;
    this.afterFull = v8.getHeapStatistics().used_heap_size;
    this.collections += 1;
  });

  constructor() {
    this.observer.observe({ entryTypes: ['gc'] });
  }

  read(): number {
    const used = v8.getHeapStatistics().used_heap_size;
    return this.afterFull === undefined ? used : Math.min(used, this.afterFull);
  }

  close(): void {
    this.observer.disconnect();
  }
}

const isFullCollection = (entry: PerformanceEntry) =>
  (entry as unknown as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR;

export class MemoryPressure {
  level: PressureLevel = 0;
  /** What memory refused since the start: streams, requests near the budget, past the bound, past a client's part. */
  readonly refusals = { streams: 0, requests: 0, busy: 0, client: 0 };
  inProgress = 0;
  /** Requests in progress by client (address or credential). */
  private readonly byClient = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private lastShrink = 0;
  /** The live heap's collections at the last shrink: a cache shrinks again only on a reading taken since. */
  private shrunkAt = -1;
  private readonly live: HeapReader | undefined;
  private readonly used: () => number;

  constructor(private readonly options: MemoryPressureOptions) {
    if (options.used) this.used = options.used;
    else {
      const live = options.heap ?? new LiveHeap();
      this.live = live;
      this.used = () => live.read();
    }
    this.timer = setInterval(() => this.sample(), SAMPLE_MS).unref();
  }

  get heapUsed(): number {
    return this.used();
  }

  /** Reads the heap and moves the level; shrinks the caches while at level 1 or above. */
  sample(): PressureLevel {
    const ratio = this.used() / this.options.oldGenerationBytes;
    let level = this.level;
    while (level < 3 && ratio >= THRESHOLDS[level]!) level = (level + 1) as PressureLevel;
    while (level > 0 && ratio < THRESHOLDS[level - 1]! - HYSTERESIS) level = (level - 1) as PressureLevel;
    // Garbage and all until the first full collection: the caches may shrink, nothing is refused.
    if (this.live?.collections === 0 && level > 1) level = 1;
    this.level = level;
    // Once a second at most, and only on a reading taken after the last shrink could show in it
    // (what a shrink frees shows after the next full collection).
    const now = Date.now();
    const reading = this.live?.collections ?? now;
    if (level >= 1 && now - this.lastShrink >= 1000 && reading !== this.shrunkAt) {
      this.lastShrink = now;
      this.shrunkAt = reading;
      this.options.shrink(level >= 2 ? 0.25 : 0.5);
    }
    return level;
  }

  /** Whether a new live stream may open now; counted when not. */
  admitsStream(): boolean {
    if (this.level < 2) return true;
    this.refusals.streams += 1;
    return false;
  }

  /**
   * Why a request may not start now ('memory' near the budget, 'busy' at the bound, 'client' at a
   * client's part), counted; undefined when it may, and it counts until `finished`.
   */
  refusesRequest(clients: readonly string[] = []): 'memory' | 'busy' | 'client' | undefined {
    if (this.level >= 3) {
      this.refusals.requests += 1;
      return 'memory';
    }
    if (clients.some((client) => (this.byClient.get(client) ?? 0) >= this.clientPart)) {
      this.refusals.client += 1;
      return 'client';
    }
    if (this.inProgress >= this.options.maxRequests) {
      this.refusals.busy += 1;
      return 'busy';
    }
    this.inProgress += 1;
    for (const client of clients) this.byClient.set(client, (this.byClient.get(client) ?? 0) + 1);
    return undefined;
  }

  /** A request admitted by `refusesRequest` has finished, or is now a stream (counted by its own share). */
  finished(clients: readonly string[] = []): void {
    this.inProgress -= 1;
    for (const client of clients) {
      const held = (this.byClient.get(client) ?? 1) - 1;
      if (held === 0) this.byClient.delete(client);
      else this.byClient.set(client, held);
    }
  }

  get maxRequests(): number {
    return this.options.maxRequests;
  }

  /** A client's part of the requests in progress: a quarter, so that it takes four to leave none. */
  get clientPart(): number {
    return Math.max(1, Math.floor(this.maxRequests * CLIENT_PART));
  }

  close(): void {
    clearInterval(this.timer);
    // Its own reader only: one a test passed is the test's.
    if (this.live instanceof LiveHeap) this.live.close();
  }
}
