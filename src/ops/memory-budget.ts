import { readFileSync } from 'node:fs';
import v8 from 'node:v8';

/*
 * One memory budget, from which every bound that holds memory follows (see `ops/README.md`,
 * "Memory budget"). The budget is the process's resident memory: MEMORY_BUDGET_MB, else the
 * container's limit (cgroup v2 `memory.max`), else 250 MB. The V8 heap gets 60 % of it (the rest
 * is the young generation, code, buffers and native memory); of the heap, the process's own
 * objects and the requests in flight keep a reserve, and what is left is shared between the
 * structures that grow with use: the entity cache, the kept answers, the live streams, the rate
 * limiter's memory store and the registered operations. A bound set explicitly takes its own
 * figure instead of its share; bounds that together exceed the heap stop the start.
 */

const MIB = 1024 * 1024;
export const DEFAULT_BUDGET_BYTES = 250_000_000;
/** The heap's part of the budget. */
const HEAP_FRACTION = 0.6;
/** The young generation beside the old space (three semi-spaces of `--max-semi-space-size=8`). */
export const YOUNG_GENERATION_BYTES = 24 * MIB;
/** The process's own heap at rest: modules, the schema, the database clients (measured: 38-44 MiB). */
export const BASE_HEAP_BYTES = 48 * MIB;
/** Of the heap: what requests in flight hold at once. */
const WORKING_FRACTION = 0.2;
/** What one idle live stream holds (test/memory-budget.test.ts measures it). */
export const STREAM_BYTES = 10 * 1024;
/** What one key of the rate limiter's memory store holds (its LRU slot, the key, the count). */
export const RATE_LIMIT_KEY_BYTES = 200;

/** How the heap left after the reserves is shared, when a bound is not set explicitly. */
const SHARES = { entityCache: 0.5, answerCache: 0.1, streams: 0.2, rateLimiter: 0.12, registrations: 0.08 } as const;
export type Share = keyof typeof SHARES;

export type MemoryFacts = {
  /** The container's memory limit (cgroup v2), when there is one. */
  containerLimitBytes: number | undefined;
  /** The heap V8 was started with (`--max-old-space-size` and the young generation). */
  heapLimitBytes: number;
};

/** The facts of this process: its cgroup's limit and V8's heap limit. */
export function processMemoryFacts(): MemoryFacts {
  let containerLimitBytes: number | undefined;
  try {
    const text = readFileSync('/sys/fs/cgroup/memory.max', 'utf8').trim();
    if (/^\d+$/.test(text)) containerLimitBytes = Number(text);
  } catch {
    // No cgroup v2 limit here.
  }
  return { containerLimitBytes, heapLimitBytes: v8.getHeapStatistics().heap_size_limit };
}

export type MemoryBudget = {
  budgetBytes: number;
  source: 'MEMORY_BUDGET_MB' | 'container limit' | 'default';
  /** The heap this budget allows (never more than V8's own limit): what the pressure levels are read against. */
  heapBytes: number;
  /** The old space `npm start` gives V8 (`--max-old-space-size`, MiB). */
  oldSpaceMiB: number;
  /** The process's own objects, and the requests in flight. */
  reserveBytes: { base: number; working: number };
  /** Each structure's bytes (explicit bounds as set, the others their share). */
  shares: Record<Share, number>;
  /** The streams and rate-limiter keys those shares hold. */
  maxStreams: number;
  rateLimitKeys: number;
};

export type ExplicitBounds = { cacheMaxBytes?: number; answerCacheMaxBytes?: number; maxStreams?: number };

/** The budget and its shares; throws a one-line Error when the explicit bounds cannot fit. */
export function memoryBudget(budgetMiB: number | undefined, explicit: ExplicitBounds, facts: MemoryFacts): MemoryBudget {
  const [budgetBytes, source]: [number, MemoryBudget['source']] =
    budgetMiB !== undefined
      ? [budgetMiB * MIB, 'MEMORY_BUDGET_MB']
      : facts.containerLimitBytes !== undefined && facts.containerLimitBytes < 1024 ** 4
        ? [facts.containerLimitBytes, 'container limit']
        : [DEFAULT_BUDGET_BYTES, 'default'];
  const wanted = Math.floor(budgetBytes * HEAP_FRACTION);
  const heapBytes = Math.min(wanted, facts.heapLimitBytes);
  const oldSpaceMiB = Math.max(16, Math.floor((wanted - YOUNG_GENERATION_BYTES) / MIB));
  const base = BASE_HEAP_BYTES;
  const working = Math.floor(heapBytes * WORKING_FRACTION);
  if (heapBytes < base + working + MIB) {
    throw new Error(`the memory budget (${source}, ${mib(budgetBytes)}) gives the heap ${mib(heapBytes)}, less than the process's own ${mib(base + working)}: raise MEMORY_BUDGET_MB to at least ${Math.ceil((base + MIB) / (1 - WORKING_FRACTION) / HEAP_FRACTION / MIB) + 1}`);
  }
  const left = heapBytes - base - working;
  const share = (name: Share) => Math.floor(left * SHARES[name]);
  const shares: Record<Share, number> = {
    entityCache: explicit.cacheMaxBytes ?? share('entityCache'),
    answerCache: explicit.answerCacheMaxBytes ?? share('answerCache'),
    streams: explicit.maxStreams !== undefined ? explicit.maxStreams * STREAM_BYTES : share('streams'),
    rateLimiter: share('rateLimiter'),
    registrations: share('registrations'),
  };
  const needed = base + working + Object.values(shares).reduce((sum, bytes) => sum + bytes, 0);
  if (needed > heapBytes) {
    const set = [
      explicit.cacheMaxBytes !== undefined ? `CACHE_MAX_BYTES ${mib(explicit.cacheMaxBytes)}` : undefined,
      explicit.answerCacheMaxBytes !== undefined ? `ANSWER_CACHE_MAX_BYTES ${mib(explicit.answerCacheMaxBytes)}` : undefined,
      explicit.maxStreams !== undefined ? `LIVE_MAX_STREAMS ${explicit.maxStreams} (${mib(explicit.maxStreams * STREAM_BYTES)})` : undefined,
    ].filter(Boolean);
    throw new Error(
      `${set.join(', ')} need ${mib(needed)} of heap with the process's own ${mib(base + working)}; the memory budget (${source}, ${mib(budgetBytes)}) gives the heap ${mib(heapBytes)}: lower them, or raise MEMORY_BUDGET_MB`,
    );
  }
  return {
    budgetBytes,
    source,
    heapBytes,
    oldSpaceMiB,
    reserveBytes: { base, working },
    shares,
    maxStreams: explicit.maxStreams ?? Math.max(1, Math.floor(shares.streams / STREAM_BYTES)),
    rateLimitKeys: Math.max(1000, Math.floor(shares.rateLimiter / RATE_LIMIT_KEY_BYTES)),
  };
}

const mib = (bytes: number) => `${(bytes / MIB).toFixed(bytes < 10 * MIB ? 1 : 0)} MiB`;
