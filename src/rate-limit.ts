import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Config } from './config.js';

export type RateLimitVerdict =
  | { allowed: true; headers: Record<string, string> }
  | { allowed: false; headers: Record<string, string>; retryAfterSeconds: number };

/**
 * Requests per window per client address and per credential (each distinct bearer token or
 * public key; hashed, so forged tokens naming someone else's account cannot use up that
 * account's allowance). Decided before any database work. In memory by default; with
 * RATE_LIMIT_STORE=postgres the counters live in the shared database, so the limits hold across
 * instances behind a load balancer.
 */
export class RateLimiter {
  private readonly byAddress: RateLimiterAbstract | undefined;
  private readonly byCredential: RateLimiterAbstract | undefined;

  constructor(
    private readonly config: Config['rateLimit'],
    postgresPool?: unknown,
  ) {
    const make = (points: number, prefix: string) => {
      if (points === 0) return undefined;
      const options = { points, duration: config.windowSeconds, keyPrefix: prefix };
      if (config.store === 'postgres' && postgresPool) {
        return new RateLimiterPostgres({
          ...options,
          storeClient: postgresPool,
          storeType: 'pool',
          tableName: 'rate_limit',
          tableCreated: true,
          clearExpiredByTimeout: false,
          // If the shared store cannot be reached, keep limiting in memory.
          insuranceLimiter: new RateLimiterMemory(options),
        } as ConstructorParameters<typeof RateLimiterPostgres>[0]);
      }
      return new RateLimiterMemory(options);
    };
    this.byAddress = make(config.perAddress, 'addr');
    this.byCredential = make(config.perCredential, 'cred');
  }

  clientAddress(request: IncomingMessage): string {
    if (this.config.trustProxy) {
      const forwarded = request.headers['x-forwarded-for'];
      const first = (Array.isArray(forwarded) ? forwarded[0] : forwarded)?.split(',')[0]?.trim();
      if (first) return first;
    }
    return request.socket.remoteAddress ?? 'unknown';
  }

  async check(request: IncomingMessage): Promise<RateLimitVerdict> {
    const credential = request.headers.authorization ?? request.headers['x-public-key'];
    const checks: [RateLimiterAbstract, string][] = [];
    if (this.byAddress) checks.push([this.byAddress, this.clientAddress(request)]);
    if (this.byCredential && typeof credential === 'string' && credential.length > 0) {
      checks.push([this.byCredential, createHash('sha256').update(credential).digest('base64url')]);
    }
    let tightest: { limit: number; remaining: number; resetSeconds: number } | undefined;
    for (const [limiter, key] of checks) {
      try {
        const result = await limiter.consume(key);
        const state = { limit: limiter.points, remaining: result.remainingPoints, resetSeconds: Math.ceil(result.msBeforeNext / 1000) };
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
