import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { rest, startServer, type TestServer } from '../helpers/app.js';
import { createOrganization, tokenFor } from '../helpers/builders.js';
import { testMode, useTestDatabase } from '../helpers/database.js';
import { redisBinary, startRedis, type RedisServer } from '../helpers/redis-server.js';

/*
 * RATE_LIMIT_STORE=redis: the limits held across instances by a Redis-protocol server (Debian's
 * redis-server or valkey-server, started on a loopback port for these tests; skipped with a
 * warning when absent, a failure under CI=true), and what an instance does when the store stops
 * answering or goes away: it limits in memory, answers every request, and never waits long.
 */
const binary = redisBinary();
const inCi = process.env.CI === 'true' || process.env.CI === '1';
if (!binary && !inCi)
  console.warn(
    'rate-limit-redis: no redis-server or valkey-server on this machine; its tests are skipped (apt-get install redis-server)',
  );

describe.skipIf(!binary && !inCi)(`the shared rate-limit store on Redis (${testMode})`, () => {
  const database = useTestDatabase();
  let redis: RedisServer;
  beforeAll(async () => {
    if (!binary) throw new Error('CI=true and no redis-server or valkey-server: .ci/run installs redis-server');
    redis = await startRedis(binary);
  });
  afterAll(async () => {
    await redis?.stop();
  });

  const limited = (perCredential: number) => ({
    RATE_LIMIT_STORE: 'redis',
    REDIS_URL: redis.url,
    RATE_LIMIT_PER_CREDENTIAL: String(perCredential),
    RATE_LIMIT_PER_ADDRESS: '0',
  });

  async function instances(count: number, env: Record<string, string>): Promise<TestServer[]> {
    const servers = [];
    for (let i = 0; i < count; i++) servers.push(await startServer(database(), { env }));
    // Connected before the first request, as a running instance is.
    for (const server of servers)
      await expect
        .poll(async () => (await server.app.metricsText()).text, { timeout: 5000 })
        .toMatch(/^api_rate_limit_store_up 1$/m);
    return servers;
  }

  it("RATE_LIMIT_STORE=redis needs REDIS_URL, and the URL's password is masked", () => {
    expect(() => loadConfig({ RATE_LIMIT_STORE: 'redis' })).toThrow(ConfigError);
    expect(() => loadConfig({ RATE_LIMIT_STORE: 'redis', REDIS_URL: 'http://x' })).toThrow(ConfigError);
    expect(loadConfig({ RATE_LIMIT_STORE: 'redis', REDIS_URL: 'redis://:pw@cache:6379' }).rateLimit.redisUrl).toBe(
      'redis://:pw@cache:6379',
    );
  });

  it("one credential's requests spread over three instances are limited at the configured rate in total", async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const servers = await instances(3, limited(12));
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 18; i++) statuses.push((await rest(servers[i % 3]!, '/auth/user-profile', { token })).status);
      expect(statuses.slice(0, 12)).toEqual(Array(12).fill(200));
      expect(statuses.slice(12)).toEqual(Array(6).fill(429));
      // Each instance alone would have allowed 12 (18 in all): the counter is the store's.
      const remaining = (await rest(servers[0]!, '/auth/user-profile', { token })).headers.get('ratelimit-remaining');
      expect(remaining).toBe('0');
    } finally {
      for (const server of servers) await server.close();
    }
  });

  it('a store that stops answering: every request is answered within the bound, limited in memory per instance, and shared again once it is back', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const [server, second] = await instances(2, limited(5));
    try {
      redis.pause();
      const statuses: number[] = [];
      const started = Date.now();
      for (let i = 0; i < 8; i++) statuses.push((await rest(server!, '/auth/user-profile', { token })).status);
      // The insurance limiter: five in this window on this instance, then 429; never a 5xx.
      expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
      // Answered, not hung on the frozen store: each waits at most the store's command bound
      // (250 ms; 2 s for the eight, idle); the no-hang bound is 10x that.
      expect(Date.now() - started).toBeLessThan(8 * 250 * 10);
      redis.resume();
      // Back: a fresh credential's requests on two instances are counted together again (in
      // memory each instance would say 4 remaining).
      const other = await tokenFor(org.parent, org, { ttlSeconds: 7200 });
      expect((await rest(server!, '/auth/user-profile', { token: other })).headers.get('ratelimit-remaining')).toBe(
        '4',
      );
      expect((await rest(second!, '/auth/user-profile', { token: other })).headers.get('ratelimit-remaining')).toBe(
        '3',
      );
    } finally {
      redis.resume();
      await server!.close();
      await second!.close();
    }
  });

  it('a store that is gone: requests are answered at once from the insurance limiter, and /metrics says so', async () => {
    const spare = await startRedis(binary!);
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const server = await startServer(database(), { env: { ...limited(3), REDIS_URL: spare.url } });
    try {
      await expect
        .poll(async () => (await server.app.metricsText()).text, { timeout: 5000 })
        .toMatch(/^api_rate_limit_store_up 1$/m);
      await spare.stop();
      await expect
        .poll(async () => (await server.app.metricsText()).text, { timeout: 5000 })
        .toMatch(/^api_rate_limit_store_up 0$/m);
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) statuses.push((await rest(server, '/auth/user-profile', { token })).status);
      expect(statuses).toEqual([200, 200, 200, 429, 429]);
    } finally {
      await server.close();
    }
  });
});
