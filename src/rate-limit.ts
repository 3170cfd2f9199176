import type { IncomingMessage } from 'node:http';
import proxyAddr from 'proxy-addr';
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { credentialKey } from './auth/credentials.js';
import type { Config } from './config.js';

export type RateLimitVerdict =
  | { allowed: true; headers: Record<string, string> }
  | { allowed: false; headers: Record<string, string>; retryAfterSeconds: number };

/**
 * Requests per window per client address and per credential (each distinct bearer token or
 * public key, however it is spelled; hashed, so forged tokens naming someone else's account
 * cannot use up that account's allowance). Decided before any database work. The client address
 * is the peer's, or with TRUST_PROXY the one the trusted proxies report (proxy-addr, as Express
 * derives it: X-Forwarded-For is read from the right, past the trusted hops only). In memory by default; with
 * RATE_LIMIT_STORE=postgres the counters live in the shared database, so the limits hold across
 * instances behind a load balancer.
 */
export class RateLimiter {
  private readonly byAddress: RateLimiterAbstract | undefined;
  private readonly byCredential: RateLimiterAbstract | undefined;
  private readonly trust: ((address: string, hop: number) => boolean) | undefined;

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
    const trusted = config.trustProxy;
    this.trust =
      trusted === undefined ? undefined : typeof trusted === 'number' ? (_address, hop) => hop < trusted : proxyAddr.compile(trusted);
  }

  /** Whether any limit is on: with none, requests are not even looked at. */
  get enabled(): boolean {
    return this.byAddress !== undefined || this.byCredential !== undefined;
  }

  clientAddress(request: IncomingMessage): string {
    if (this.trust && request.socket.remoteAddress) return proxyAddr(request, this.trust);
    return request.socket.remoteAddress ?? 'unknown';
  }

  async check(request: IncomingMessage): Promise<RateLimitVerdict> {
    const publicKey = request.headers['x-public-key'];
    const credential = credentialKey(request.headers.authorization, typeof publicKey === 'string' ? publicKey : undefined);
    const checks: [RateLimiterAbstract, string][] = [];
    if (this.byAddress) checks.push([this.byAddress, this.clientAddress(request)]);
    if (this.byCredential && credential !== undefined) checks.push([this.byCredential, credential]);
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
