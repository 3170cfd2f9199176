import type { IncomingMessage } from 'node:http';
import proxyAddr from 'proxy-addr';
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import {
  RateLimiterMemory,
  RateLimiterPostgres,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import { credentialKey } from '../auth/credentials.js';
import type { Config } from '../config.js';

export type RateLimitVerdict =
  | { allowed: true; headers: Record<string, string> }
  | { allowed: false; headers: Record<string, string>; retryAfterSeconds: number };

/**
 * Requests per window per client address (behind TRUST_PROXY, as proxy-addr derives it) and per
 * credential (hashed), decided before any database work. In memory, or shared across instances in
 * Redis or PostgreSQL; a shared store that does not answer within its bound never fails or holds a
 * request: the instance limits in memory meanwhile.
 */
export class RateLimiter {
  private readonly byAddress: RateLimiterAbstract | undefined;
  private readonly byCredential: RateLimiterAbstract | undefined;
  private readonly trust: ((address: string, hop: number) => boolean) | undefined;

  /** The memory stores (the limits', or their insurance limiters'). */
  private readonly stores: BoundedMemoryStorage[] = [];

  /** RATE_LIMIT_STORE=redis: the connection to the store, shared by both limits. */
  private readonly redis: Redis | undefined;

  constructor(
    private readonly config: Config['rateLimit'],
    postgresPool?: unknown,
    onStoreState?: (up: boolean, error?: Error) => void,
    /** Keys the memory store holds at most, for both limits together (the memory budget's share). */
    memoryKeys = 100_000,
  ) {
    if (config.store === 'redis' && config.redisUrl && (config.perAddress > 0 || config.perCredential > 0)) {
      this.redis = connectRedis(config.redisUrl, onStoreState);
    }
    const inMemory = (options: { points: number; duration: number; keyPrefix: string }) => {
      const store = new BoundedMemoryStorage(Math.ceil(memoryKeys / 2));
      this.stores.push(store);
      return bounded(new RateLimiterMemory(options), store);
    };
    const make = (points: number, prefix: string) => {
      if (points === 0) return undefined;
      const options = { points, duration: config.windowSeconds, keyPrefix: prefix };
      if (this.redis) {
        return new RateLimiterRedis({
          ...options,
          storeClient: this.redis,
          // Not connected: the insurance limiter answers at once instead of a command that waits.
          rejectIfRedisNotReady: true,
          insuranceLimiter: inMemory(options),
        });
      }
      if (config.store === 'postgres' && postgresPool) {
        return new RateLimiterPostgres({
          ...options,
          storeClient: postgresPool,
          storeType: 'pool',
          tableName: 'rate_limit',
          tableCreated: true,
          clearExpiredByTimeout: false,
          // If the shared store cannot be reached, keep limiting in memory.
          insuranceLimiter: inMemory(options),
        } as ConstructorParameters<typeof RateLimiterPostgres>[0]);
      }
      return inMemory(options);
    };
    this.byAddress = make(config.perAddress, 'addr');
    this.byCredential = make(config.perCredential, 'cred');
    const trusted = config.trustProxy;
    this.trust =
      trusted === undefined
        ? undefined
        : typeof trusted === 'number'
          ? (_address, hop) => hop < trusted
          : proxyAddr.compile(trusted);
  }

  /** Whether the shared Redis store is connected (undefined: not in use). */
  get storeUp(): boolean | undefined {
    return this.redis ? this.redis.status === 'ready' : undefined;
  }

  close(): void {
    this.redis?.disconnect();
  }

  /** Keys the memory stores hold now (both limits, the insurance limiters included). */
  get memoryKeys(): number {
    return this.stores.reduce((sum, store) => sum + store.size, 0);
  }

  /** Whether any limit is on: with none, requests are not even looked at. */
  get enabled(): boolean {
    return this.byAddress !== undefined || this.byCredential !== undefined;
  }

  clientAddress(request: IncomingMessage): string {
    if (this.trust && request.socket.remoteAddress) return proxyAddr(request, this.trust);
    return request.socket.remoteAddress ?? 'unknown';
  }

  /** Who sent `request`, as the limits count it: derived once, for the limits and the memory budget's parts. */
  clientOf(request: IncomingMessage): Client {
    const address = this.clientAddress(request);
    const credential = credentialOf(request);
    return {
      address,
      credential,
      keys: credential === undefined ? [`address ${address}`] : [`address ${address}`, `credential ${credential}`],
    };
  }

  /** `cost`: how many requests this one counts as (an export counts as many), at most a whole window's allowance. */
  async check(client: Client, cost = 1): Promise<RateLimitVerdict> {
    const { address, credential } = client;
    const checks: [RateLimiterAbstract, string][] = [];
    if (this.byAddress) checks.push([this.byAddress, address]);
    if (this.byCredential && credential !== undefined) checks.push([this.byCredential, credential]);
    let tightest: { limit: number; remaining: number; resetSeconds: number } | undefined;
    for (const [limiter, key] of checks) {
      try {
        const result = await limiter.consume(key, Math.min(cost, limiter.points));
        const state = {
          limit: limiter.points,
          remaining: result.remainingPoints,
          resetSeconds: Math.ceil(result.msBeforeNext / 1000),
        };
        if (!tightest || state.remaining < tightest.remaining) tightest = state;
      } catch (rejection) {
        if (!(rejection instanceof RateLimiterRes)) throw rejection;
        const retryAfterSeconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
        return {
          allowed: false,
          retryAfterSeconds,
          headers: {
            'Retry-After': String(retryAfterSeconds),
            ...this.headers({ limit: limiter.points, remaining: 0, resetSeconds: retryAfterSeconds }),
          },
        };
      }
    }
    return { allowed: true, headers: tightest ? this.headers(tightest) : {} };
  }

  private headers(state: { limit: number; remaining: number; resetSeconds: number }): Record<string, string> {
    return {
      'RateLimit-Limit': String(state.limit),
      'RateLimit-Remaining': String(Math.max(0, state.remaining)),
      'RateLimit-Reset': String(state.resetSeconds),
      'RateLimit-Policy': `${state.limit};w=${this.config.windowSeconds}`,
    };
  }
}

/** A request's sender: its address (behind TRUST_PROXY, the proxies'), its credential's hash, and both as keys. */
export type Client = { address: string; credential: string | undefined; keys: string[] };

function credentialOf(request: IncomingMessage): string | undefined {
  const publicKey = request.headers['x-public-key'];
  return credentialKey(request.headers.authorization, typeof publicKey === 'string' ? publicKey : undefined);
}

/** Bounds on the store's connection: a command that waits longer fails, and the insurance limiter answers. */
const REDIS_COMMAND_TIMEOUT_MS = 250;
const REDIS_CONNECT_TIMEOUT_MS = 1000;

/** The Redis-protocol connection: no offline queue, each command bounded, reconnecting forever (2 s backoff cap). */
function connectRedis(url: string, onStoreState?: (up: boolean, error?: Error) => void): Redis {
  const client = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
    retryStrategy: (attempt) => Math.min(100 * attempt, 2000),
    connectionName: 'credits-read-api-rate-limit',
  });
  let up: boolean | undefined;
  const report = (next: boolean, error?: Error) => {
    if (up === next) return;
    up = next;
    onStoreState?.(next, error);
  };
  client.on('ready', () => report(true));
  client.on('error', (error: Error) => report(false, error));
  client.on('close', () => report(false));
  return client;
}

/**
 * rate-limiter-flexible's memory store keeps every key with a timer until its window ends: this one
 * has the same calls on an LRU of `maxKeys`, whose windows end on read.
 */
class BoundedMemoryStorage {
  private readonly records: LRUCache<string, { value: number; expiresAt: number | null }>;

  constructor(maxKeys: number) {
    this.records = new LRUCache({ max: maxKeys });
  }

  /** What rate-limiter-flexible iterates to dump its store. */
  get _storage(): Map<string, { value: number; expiresAt: number | null }> {
    return new Map(this.records.entries());
  }

  incrby(key: string, value: number, durationSec: number): RateLimiterRes {
    const record = this.records.get(key);
    const left = record?.expiresAt ? record.expiresAt - Date.now() : -1;
    if (!record || (record.expiresAt && left <= 0)) return this.set(key, value, durationSec);
    record.value += value;
    return new RateLimiterRes(0, left, record.value, false);
  }

  set(key: string, value: number, durationSec: number): RateLimiterRes {
    const durationMs = durationSec * 1000;
    this.records.set(key, { value, expiresAt: durationMs > 0 ? Date.now() + durationMs : null });
    return new RateLimiterRes(0, durationMs === 0 ? -1 : durationMs, value, true);
  }

  get(key: string): RateLimiterRes | null {
    const record = this.records.get(key);
    if (!record) return null;
    return new RateLimiterRes(0, record.expiresAt ? record.expiresAt - Date.now() : -1, record.value, false);
  }

  delete(key: string): boolean {
    return this.records.delete(key);
  }

  get size(): number {
    return this.records.size;
  }

  _restoreRecord(key: string, value: number, expiresAt: number | null): void {
    this.records.set(key, { value, expiresAt });
  }
}

/** A memory limiter on the bounded store (its `_memoryStorage` is the one thing replaced). */
function bounded(limiter: RateLimiterMemory, store: BoundedMemoryStorage): RateLimiterMemory {
  (limiter as unknown as { _memoryStorage: BoundedMemoryStorage })._memoryStorage = store;
  return limiter;
}
