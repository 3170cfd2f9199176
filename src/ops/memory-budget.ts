import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import { RECORDS_SHARE, RING_MAX_BYTES } from '../db/record-ring.js';

/*
 * One memory budget, from which every bound that holds memory follows (`ops/README.md`, "Memory
 * budget"): MEMORY_BUDGET_MB, else the container's limit, else 250 MB. The records take their part
 * first; the heap gets 64 % of the rest, and its old generation up to where shedding starts is shared
 * between the structures that grow with use. Explicit bounds that exceed it stop the start.
 */

const MIB = 1024 * 1024;
export const DEFAULT_BUDGET_BYTES = 250_000_000;
/** The heap's part of the budget (the rest: code, buffers, the allocator and native memory). */
const HEAP_FRACTION = 0.64;
/**
 * The live heap's share of the old generation at which the caches shrink, new streams and then requests are refused.
 */
export const SHEDDING_THRESHOLDS = [0.8, 0.88, 0.95] as const;
const ACCOUNTED_FRACTION = SHEDDING_THRESHOLDS[0];
/** The young generation beside the old space (three semi-spaces of `--max-semi-space-size=8`). */
export const YOUNG_GENERATION_BYTES = 24 * MIB;
/** The process's own objects in the old generation, with every path run (figures: test/bench/README.md). */
export const BASE_HEAP_BYTES = 44 * MIB;
/** Of the accounted part: what requests in progress hold at once. */
const WORKING_FRACTION = 0.15;
/** What one request in progress holds at most (a subscription being opened measured 55 KB). */
export const REQUEST_BYTES = 64 * 1024;
/** What one idle live stream holds (test/memory-budget.test.ts measures it). */
export const STREAM_BYTES = 10 * 1024;
/** Traced: the SDK's objects and its export queue (figures: test/bench/README.md). */
export const TRACING_HEAP_BYTES = 8 * MIB;
export const TRACED_STREAM_BYTES = 12 * 1024;
/** What one key of the rate limiter's memory store holds (its LRU slot, the key, the count). */
export const RATE_LIMIT_KEY_BYTES = 200;

/**
 * The records' part of the budget, taken before the heap's: 14 %, and 40 % of what is above 190 MB
 * (59 MB of 250, about 139,000 users). A user held there costs a miss nothing.
 */
const RECORDS_FRACTION = 0.14;
const RECORDS_GROWTH_ABOVE_BYTES = 190_000_000;
const RECORDS_GROWTH = 0.4;

/** Records' bytes, at most what one ring holds: the heap takes the rest. */
const inOneRing = (bytes: number) => Math.min(RING_MAX_BYTES, Math.floor(bytes));

/** The records' part of a budget (without an explicit CACHE_MAX_BYTES). */
const recordsPart = (budgetBytes: number) =>
  inOneRing(budgetBytes * RECORDS_FRACTION + Math.max(0, budgetBytes - RECORDS_GROWTH_ABOVE_BYTES) * RECORDS_GROWTH);

/** How the accounted part left after the reserves is shared (what explicit bounds leave, in these proportions). */
const SHARES = { entityCache: 0.55, streams: 0.25, rateLimiter: 0.12, registrations: 0.08 } as const;
export type Share = keyof typeof SHARES;

export type MemoryFacts = {
  containerLimitBytes: number | undefined;
  /** The heap V8 was started with (`--max-old-space-size` and the young generation). */
  heapLimitBytes: number;
};

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
  /** The heap this budget allows, young and old generations (never more than V8's own limit). */
  heapBytes: number;
  /** Its old generation: what the pressure levels are read against. */
  oldGenerationBytes: number;
  /** The part of it the reserves and shares divide (up to where shedding starts). */
  accountedBytes: number;
  /** The old space `npm start` gives V8 (`--max-old-space-size`, MiB). */
  oldSpaceMiB: number;
  /** Of the old generation: the process's own objects, and the requests in flight. */
  reserveBytes: { base: number; working: number };
  /** Each structure's bytes (explicit bounds as set, the others their share); the entity cache's with its records. */
  shares: Record<Share, number>;
  /** Of the entity cache's share, its records' bytes: outside the heap, taken from the budget before it. */
  recordBytes: number;
  /** The streams and rate-limiter keys those shares hold, and what a stream is counted as. */
  maxStreams: number;
  streamBytes: number;
  /** The requests in progress the working reserve holds; more are refused 503 until some finish. */
  maxRequests: number;
  rateLimitKeys: number;
};

export type ExplicitBounds = {
  cacheMaxBytes?: number;
  maxStreams?: number;
  /** Tracing on: its SDK and queue join the process's own objects, and a stream holds more. */
  traced?: boolean;
};

/** How a budget divides the heap (never more than V8's own limit). */
function heapLayout(budgetBytes: number, heapLimitBytes: number) {
  const wanted = Math.floor(budgetBytes * HEAP_FRACTION);
  const heapBytes = Math.min(wanted, heapLimitBytes);
  const oldSpaceMiB = Math.max(16, Math.floor((wanted - YOUNG_GENERATION_BYTES) / MIB));
  const oldGenerationBytes = Math.min(oldSpaceMiB * MIB, heapLimitBytes - YOUNG_GENERATION_BYTES);
  const accountedBytes = Math.floor(oldGenerationBytes * ACCOUNTED_FRACTION);
  return {
    heapBytes,
    oldSpaceMiB,
    oldGenerationBytes,
    accountedBytes,
    working: Math.floor(accountedBytes * WORKING_FRACTION),
  };
}

/** The least MEMORY_BUDGET_MB above `budgetBytes` with which these explicit bounds fit. */
function leastBudget(budgetBytes: number, explicit: ExplicitBounds): number {
  const fits = (mebibytes: number) => {
    try {
      memoryBudget(
        mebibytes,
        explicit,
        { containerLimitBytes: undefined, heapLimitBytes: Number.MAX_SAFE_INTEGER },
        false,
      );
      return true;
    } catch {
      return false;
    }
  };
  let low = Math.ceil(budgetBytes / MIB);
  let high = low * 2;
  while (!fits(high)) [low, high] = [high, high * 2];
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    if (fits(middle)) high = middle;
    else low = middle + 1;
  }
  return high;
}

/** Whether the accounted part holds the process's own objects and the requests in progress, with a MiB to share. */
const roomy = (accountedBytes: number, base: number, working: number) => accountedBytes >= base + working + MIB;

/** The budget and its shares; throws a one-line Error when the explicit bounds cannot fit. */
export function memoryBudget(
  budgetMiB: number | undefined,
  explicit: ExplicitBounds,
  facts: MemoryFacts,
  sayLeast = true,
): MemoryBudget {
  const [budgetBytes, source]: [number, MemoryBudget['source']] =
    budgetMiB !== undefined
      ? [budgetMiB * MIB, 'MEMORY_BUDGET_MB']
      : facts.containerLimitBytes !== undefined && facts.containerLimitBytes < 1024 ** 4
        ? [facts.containerLimitBytes, 'container limit']
        : [DEFAULT_BUDGET_BYTES, 'default'];
  // The records first (outside the heap), then the heap from what they leave.
  if (explicit.cacheMaxBytes !== undefined)
    return divide(budgetBytes, source, inOneRing(explicit.cacheMaxBytes * RECORDS_SHARE), explicit, facts, sayLeast);
  // Explicit streams that do not fit beside the grown records keep them at 14 %.
  if (budgetBytes > RECORDS_GROWTH_ABOVE_BYTES && explicit.maxStreams !== undefined) {
    try {
      return divide(budgetBytes, source, recordsPart(budgetBytes), explicit, facts, false);
    } catch {
      return divide(budgetBytes, source, inOneRing(budgetBytes * RECORDS_FRACTION), explicit, facts, sayLeast);
    }
  }
  return divide(budgetBytes, source, recordsPart(budgetBytes), explicit, facts, sayLeast);
}

/** `memoryBudget` with the records' part chosen. */
function divide(
  budgetBytes: number,
  source: MemoryBudget['source'],
  recordBytes: number,
  explicit: ExplicitBounds,
  facts: MemoryFacts,
  sayLeast: boolean,
): MemoryBudget {
  const { heapBytes, oldSpaceMiB, oldGenerationBytes, accountedBytes, working } = heapLayout(
    budgetBytes - recordBytes,
    facts.heapLimitBytes,
  );
  const base = BASE_HEAP_BYTES + (explicit.traced ? TRACING_HEAP_BYTES : 0);
  const streamBytes = explicit.traced ? TRACED_STREAM_BYTES : STREAM_BYTES;
  // An explicit cache bound whose records leave too little heap is named below, as the bounds that do not fit.
  if (!roomy(accountedBytes, base, working) && explicit.cacheMaxBytes === undefined) {
    const least = sayLeast ? ` to at least ${leastBudget(budgetBytes, explicit)}` : '';
    throw new Error(
      `the memory budget (${source}, ${mib(budgetBytes)}) keeps ${mib(recordBytes)} for the cache's records and gives the heap's old generation ${mib(oldGenerationBytes)}, too little for the process's own ${mib(base + working)} below where shedding starts: raise MEMORY_BUDGET_MB${least}`,
    );
  }
  // Explicit bounds first; the other shares divide what is left, in their proportions.
  const fixed: Partial<Record<Share, number>> = {
    entityCache: explicit.cacheMaxBytes === undefined ? undefined : explicit.cacheMaxBytes - recordBytes,
    streams: explicit.maxStreams !== undefined ? explicit.maxStreams * streamBytes : undefined,
  };
  const names = Object.keys(SHARES) as Share[];
  const open = names.filter((name) => fixed[name] === undefined);
  const fixedBytes = names.reduce((sum, name) => sum + (fixed[name] ?? 0), 0);
  const rest = accountedBytes - base - working - fixedBytes;
  const needed = base + working + fixedBytes + (open.length > 0 ? MIB : 0);
  if (needed > accountedBytes) {
    const set = [
      explicit.cacheMaxBytes !== undefined
        ? `CACHE_MAX_BYTES ${mib(explicit.cacheMaxBytes)} (${mib(recordBytes)} of it outside the heap)`
        : undefined,
      explicit.maxStreams !== undefined
        ? `LIVE_MAX_STREAMS ${explicit.maxStreams} (${mib(explicit.maxStreams * streamBytes)})`
        : undefined,
    ].filter(Boolean);
    throw new Error(
      `${set.join(', ')} need ${mib(needed)} of heap with the process's own ${mib(base + working)}; the memory budget (${source}, ${mib(budgetBytes)}) accounts for ${mib(accountedBytes)} of the heap${recordBytes > 0 ? ` beside ${mib(recordBytes)} of cache records` : ''}: lower them, or raise MEMORY_BUDGET_MB${sayLeast ? ` to at least ${leastBudget(budgetBytes, explicit)}` : ''}`,
    );
  }
  const openFraction = open.reduce((sum, name) => sum + SHARES[name], 0);
  const shares = Object.fromEntries(
    names.map((name) => [name, fixed[name] ?? Math.floor((rest * SHARES[name]) / openFraction)]),
  ) as Record<Share, number>;
  // The entity cache's share is its entries' part of the heap and its records.
  shares.entityCache += recordBytes;
  return {
    budgetBytes,
    source,
    heapBytes,
    oldGenerationBytes,
    accountedBytes,
    oldSpaceMiB,
    reserveBytes: { base, working },
    shares,
    recordBytes,
    maxStreams: explicit.maxStreams ?? Math.max(1, Math.floor(shares.streams / streamBytes)),
    streamBytes,
    maxRequests: Math.floor(working / REQUEST_BYTES),
    rateLimitKeys: Math.max(1000, Math.floor(shares.rateLimiter / RATE_LIMIT_KEY_BYTES)),
  };
}

const mib = (bytes: number) => `${(bytes / MIB).toFixed(bytes < 10 * MIB ? 1 : 0)} MiB`;
