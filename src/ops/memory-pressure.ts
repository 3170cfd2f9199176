import v8 from 'node:v8';

/*
 * Refuse before running out (see `ops/README.md`, "Memory budget"). The heap in use is read
 * against the budget's heap several times a second; as it rises the process sheds, in order:
 * the caches shrink (level 1), new live streams are refused (level 2), and, only as a last
 * resort, requests are answered 503 with Retry-After while readiness says so (level 3). A level
 * is left once the heap is a margin below the level's threshold, so that it does not flap.
 */

export type PressureLevel = 0 | 1 | 2 | 3;

/** The heap's share of its limit at which each level starts. */
const THRESHOLDS: readonly number[] = [0.75, 0.85, 0.93];
/** A level is left this far below its threshold. */
const HYSTERESIS = 0.05;
const SAMPLE_MS = 100;

export type MemoryPressureOptions = {
  /** The heap the budget allows (bytes). */
  heapBytes: number;
  /** Level 1 was entered, or is still on a second later: the caches shrink to this fraction of what they hold. */
  shrink: (fraction: number) => void;
  /** The heap in use (tests pass their own). */
  used?: () => number;
};

export class MemoryPressure {
  level: PressureLevel = 0;
  /** What was refused because of memory, since the start. */
  readonly refusals = { streams: 0, requests: 0 };
  private readonly timer: NodeJS.Timeout;
  private lastShrink = 0;
  private readonly used: () => number;

  constructor(private readonly options: MemoryPressureOptions) {
    this.used = options.used ?? (() => v8.getHeapStatistics().used_heap_size);
    this.timer = setInterval(() => this.sample(), SAMPLE_MS).unref();
  }

  /** The heap in use (bytes), as the levels read it. */
  get heapUsed(): number {
    return this.used();
  }

  /** Reads the heap and moves the level; shrinks the caches while at level 1 or above. */
  sample(): PressureLevel {
    const ratio = this.used() / this.options.heapBytes;
    let level = this.level;
    while (level < 3 && ratio >= THRESHOLDS[level]!) level = (level + 1) as PressureLevel;
    while (level > 0 && ratio < THRESHOLDS[level - 1]! - HYSTERESIS) level = (level - 1) as PressureLevel;
    this.level = level;
    const now = Date.now();
    if (level >= 1 && now - this.lastShrink >= 1000) {
      this.lastShrink = now;
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

  /** Whether a request may be served now; counted when not. */
  admitsRequest(): boolean {
    if (this.level < 3) return true;
    this.refusals.requests += 1;
    return false;
  }

  close(): void {
    clearInterval(this.timer);
  }
}
