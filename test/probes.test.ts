import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/database.js';
import { metricValue, rest, startServer, useServer } from './helpers/app.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { createEmptyDatabase, testMode, useTestDatabase } from './helpers/database.js';

describe(`probes: /healthz, /readyz, /health (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { RATE_LIMIT_PER_ADDRESS: '5' } });

  it('liveness and readiness answer 200 on a migrated, reachable database', async () => {
    const live = await rest(server(), '/healthz');
    expect(live.status).toBe(200);
    expect(live.body).toEqual({ status: 'ok' });
    const ready = await rest(server(), '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ready' });
    const health = await rest(server(), '/health');
    expect(health.status).toBe(200);
    expect(health.body).toMatchObject({ status: 'ok', database: testMode === 'postgres' ? 'postgres' : 'pglite' });
  });

  it.each(['POST', 'PUT', 'DELETE'])(
    '%s on a probe: 405 METHOD_NOT_ALLOWED with Allow: GET, HEAD, in the JSON envelope',
    async (method) => {
      for (const path of ['/healthz', '/readyz', '/health']) {
        const answer = await rest(server(), path, { method });
        expect(answer.status).toBe(405);
        expect(answer.headers.get('allow')).toBe('GET, HEAD');
        expect(answer.body).toMatchObject({ success: false, error: { code: 'METHOD_NOT_ALLOWED' } });
      }
    },
  );

  it('probes are not rate limited, and one check a second serves every probe', async () => {
    await rest(server(), '/readyz');
    const before = database().queries.count;
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => rest(server(), i % 2 ? '/readyz' : '/health')),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(50).fill(200));
    expect(database().queries.count - before).toBeLessThanOrEqual(1);
  });

  it('an unmigrated database: alive, not ready (migrations pending)', async () => {
    const empty = await createEmptyDatabase();
    const app = await startServer(empty, { live: false });
    try {
      expect((await rest(app, '/healthz')).status).toBe(200);
      const ready = await rest(app, '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body).toEqual({ status: 'unavailable', reason: 'migrations pending' });
      const health = await rest(app, '/health');
      expect(health.status).toBe(503);
      expect(health.body.error.code).toBe('SERVICE_UNAVAILABLE');
    } finally {
      await app.close();
      await empty.close();
    }
  });

  it('a database that went away: alive, not ready (database unavailable), within the check bound', async () => {
    const own = await openDatabase(testMode === 'postgres' ? { url: database().url! } : { memory: true });
    const app = await startServer(own, { live: testMode === 'postgres' });
    try {
      await own.close();
      const started = performance.now();
      const ready = await rest(app, '/readyz');
      // No hang: a closed database answers the check at once (milliseconds idle).
      expect(performance.now() - started).toBeLessThan(3000);
      expect(ready.status).toBe(503);
      expect(ready.body).toEqual({ status: 'unavailable', reason: 'database unavailable' });
      expect((await rest(app, '/healthz')).status).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('draining: readiness is 503 at once while requests are still served, each answer closing its connection', async () => {
    const app = await startServer(database());
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      expect((await rest(app, '/readyz')).status).toBe(200);
      app.app.drain();
      const ready = await rest(app, '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body).toEqual({ status: 'unavailable', reason: 'draining' });
      const profile = await rest(app, '/auth/user-profile', { token });
      expect(profile.status).toBe(200);
      expect(profile.headers.get('connection')).toBe('close');
      expect((await rest(app, '/healthz')).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe(`metrics (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);

  it('GET /metrics: Prometheus text with the process and the cache; the cache counters move with requests', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const before = await rest(server(), '/metrics');
    expect(before.status).toBe(200);
    expect(before.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(before.text).toMatch(/^process_cpu_user_seconds_total /m);
    expect(metricValue(before.text, 'api_cache_live')).toBe(1);
    for (let i = 0; i < 5; i++) expect((await rest(server(), '/auth/user-profile', { token })).status).toBe(200);
    const after = (await rest(server(), '/metrics')).text;
    expect(metricValue(after, 'api_cache_hits_total')).toBeGreaterThanOrEqual(
      metricValue(before.text, 'api_cache_hits_total') + 4,
    );
    expect(metricValue(after, 'api_cache_misses_total')).toBeGreaterThan(
      metricValue(before.text, 'api_cache_misses_total'),
    );
    expect(metricValue(after, 'api_cache_entries')).toBeGreaterThan(0);
    expect(metricValue(after, 'api_cache_bytes')).toBeGreaterThan(0);
    // No series is labelled with anything a request sent.
    expect(after).not.toContain(token);
    expect(after).not.toContain(org.parent.id);
  });
});

describe('shutdown delay setting', () => {
  it('must be shorter than the shutdown timeout it is part of', () => {
    expect(loadConfig({}).shutdownDelayMs).toBe(3000);
    expect(() => loadConfig({ SHUTDOWN_DELAY_MS: '10000' })).toThrow(/SHUTDOWN_DELAY_MS/);
    expect(loadConfig({ SHUTDOWN_DELAY_MS: '0' }).shutdownDelayMs).toBe(0);
  });
});
