import { describe, expect, it } from 'vitest';
import { operationLabel } from '../src/graphql/observe.js';
import { parse } from 'graphql';
import type { AddressInfo } from 'node:net';
import { createMetricsServer } from '../src/http/server.js';
import { loadConfig } from '../src/config.js';
import { rest, startServer, useServer } from './helpers/app.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/** The value of one series in Prometheus text (labels in the order prom-client writes them), or 0 when absent. */
function series(text: string, name: string, labels: Record<string, string> = {}): number {
  const selector =
    Object.keys(labels).length === 0
      ? ''
      : `{${Object.entries(labels)
          .map(([k, v]) => `${k}="${v}"`)
          .join(',')}}`;
  const line = text.split('\n').find((l) => l.startsWith(`${name}${selector} `));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** How much `api_http_requests_total` with these labels grew between two scrapes. */
function answered(before: string, after: string, labels: Record<string, string>): number {
  return series(after, 'api_http_requests_total', labels) - series(before, 'api_http_requests_total', labels);
}

describe(`GET /metrics moves with the traffic, by bounded labels (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { RATE_LIMIT_PER_CREDENTIAL: '30' } });
  const scrape = async () => (await rest(server(), '/metrics')).text;

  it('counts REST answers by route, method, status and error code, with a latency histogram per route', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await rest(server(), '/auth/user-profile', { token })).status).toBe(200);
    expect((await rest(server(), '/auth/user-profile')).status).toBe(401);
    expect((await rest(server(), '/auth/nothing-here?token=abc')).status).toBe(404);
    expect((await rest(server(), '/auth/user-profile', { token, method: 'POST' })).status).toBe(405);
    const after = await scrape();
    const moved = (labels: Record<string, string>) => answered(before, after, labels);
    expect(moved({ route: '/auth/user-profile', method: 'GET', status: '200', code: '' })).toBe(3);
    expect(moved({ route: '/auth/user-profile', method: 'GET', status: '401', code: 'UNAUTHORIZED' })).toBe(1);
    expect(moved({ route: 'other', method: 'GET', status: '404', code: 'NOT_FOUND' })).toBe(1);
    expect(moved({ route: '/auth/user-profile', method: 'POST', status: '405', code: 'METHOD_NOT_ALLOWED' })).toBe(1);
    const count = (text: string) =>
      series(text, 'api_http_request_duration_seconds_count', { route: '/auth/user-profile' });
    expect(count(after) - count(before)).toBe(5);
    // Nothing a request sent becomes a label: not the unknown path, its query, or the token.
    expect(after).not.toContain('nothing-here');
    expect(after).not.toContain(token);
    expect(after).not.toContain(org.parent.id);
  });

  it('labels GraphQL requests by the root fields they select, and their errors by code', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const before = await scrape();
    expect((await server().graphql('query MyScreen { me { userID } }', { token })).status).toBe(200);
    expect(
      (await server().graphql('query { b: organization { organizationName } a: me { userID } }', { token })).status,
    ).toBe(200);
    expect((await server().graphql('{ me { userID } }')).errors?.[0]?.extensions?.code).toBe('UNAUTHORIZED');
    expect((await server().graphql('{ me { ', { token })).errors?.[0]?.extensions?.code).toBe('GRAPHQL_PARSE_FAILED');
    expect((await server().graphql('{ me { noSuchField } }', { token })).errors?.[0]?.extensions?.code).toBe(
      'GRAPHQL_VALIDATION_FAILED',
    );
    const after = await scrape();
    const operations = (text: string, operation: string) =>
      series(text, 'api_graphql_operation_duration_seconds_count', { operation });
    // Executed, with data or with an error (the unauthenticated one); not the refused documents.
    expect(operations(after, 'me') - operations(before, 'me')).toBe(2);
    expect(operations(after, 'me,organization') - operations(before, 'me,organization')).toBe(1);
    // The client's operation name is not a label.
    expect(after).not.toContain('MyScreen');
    const moved = (labels: Record<string, string>) => answered(before, after, labels);
    expect(moved({ route: '/graphql', method: 'POST', status: '200', code: '' })).toBe(2);
    expect(moved({ route: '/graphql', method: 'POST', status: '200', code: 'UNAUTHORIZED' })).toBe(1);
    // A client that does not ask for application/graphql-response+json gets these with 200.
    expect(moved({ route: '/graphql', method: 'POST', status: '200', code: 'GRAPHQL_PARSE_FAILED' })).toBe(1);
    expect(moved({ route: '/graphql', method: 'POST', status: '200', code: 'GRAPHQL_VALIDATION_FAILED' })).toBe(1);
  });

  it('counts rate-limit refusals; shows the change feed, the retrieval counter and (on PostgreSQL) the pool', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const before = await scrape();
    let refused = 0;
    for (let i = 0; i < 40; i++)
      if ((await rest(server(), '/auth/user-profile', { token })).status === 429) refused += 1;
    expect(refused).toBeGreaterThan(0);
    const after = await scrape();
    expect(series(after, 'api_rate_limited_total') - series(before, 'api_rate_limited_total')).toBe(refused);
    expect(
      answered(before, after, { route: '/auth/user-profile', method: 'GET', status: '429', code: 'RATE_LIMITED' }),
    ).toBe(refused);
    expect(series(after, 'api_cache_live')).toBe(1);
    expect(after).toMatch(/^api_change_feed_reconnects_total \d+$/m);
    expect(after).toMatch(/^api_retrieval_counter_pending \d+$/m);
    expect(after).toMatch(/^api_retrieval_counter_write_failures_total \d+$/m);
    if (testMode === 'postgres') {
      expect(
        series(after, 'api_db_pool_connections', { state: 'idle' }) +
          series(after, 'api_db_pool_connections', { state: 'in_use' }),
      ).toBeGreaterThan(0);
      expect(after).toMatch(/^api_db_pool_connections\{state="waiting"\} \d+$/m);
    }
  });
});

describe(`METRICS_PORT (${testMode})`, () => {
  const database = useTestDatabase();

  it('moves /metrics off the API port to a server of its own, which serves nothing else', async () => {
    const api = await startServer(database(), { env: { METRICS_PORT: '9464' } });
    const metrics = createMetricsServer(() => api.app.metricsText());
    await new Promise<void>((resolve) => metrics.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(metrics.address() as AddressInfo).port}`;
    try {
      expect((await rest(api, '/healthz')).status).toBe(200);
      const onApi = await rest(api, '/metrics');
      expect(onApi.status).toBe(404);
      expect(onApi.body.error.code).toBe('NOT_FOUND');
      const scraped = await fetch(`${url}/metrics`);
      expect(scraped.status).toBe(200);
      const text = await scraped.text();
      expect(text).toMatch(/^api_http_requests_total\{route="\/healthz",method="GET",status="200",code=""\} 1$/m);
      expect((await fetch(`${url}/auth/user-profile`)).status).toBe(404);
      const post = await fetch(`${url}/metrics`, { method: 'POST' });
      expect(post.status).toBe(405);
      expect(post.headers.get('allow')).toBe('GET, HEAD');
      expect(((await post.json()) as { error: { code: string } }).error.code).toBe('METHOD_NOT_ALLOWED');
    } finally {
      metrics.close();
      await api.close();
    }
    const starting = createMetricsServer(() => undefined);
    await new Promise<void>((resolve) => starting.listen(0, '127.0.0.1', resolve));
    try {
      expect((await fetch(`http://127.0.0.1:${(starting.address() as AddressInfo).port}/metrics`)).status).toBe(503);
    } finally {
      starting.close();
    }
  });

  it('must differ from PORT', () => {
    expect(() => loadConfig({ PORT: '4000', METRICS_PORT: '4000' })).toThrow(/METRICS_PORT/);
    expect(loadConfig({ METRICS_PORT: '9464' }).metricsPort).toBe(9464);
    expect(loadConfig({}).metricsPort).toBeUndefined();
    expect(loadConfig({ METRICS_PORT: '' }).metricsPort).toBeUndefined();
    expect(() => loadConfig({ METRICS_PORT: 'nine' })).toThrow(/METRICS_PORT/);
  });
});

describe('GraphQL operation labels', () => {
  it('are the sorted root fields, without aliases, whatever the client names the operation', () => {
    expect(operationLabel(parse('query Anything { me { userID } }'), undefined)).toBe('me');
    expect(
      operationLabel(parse('{ z: creditAnalysis { creditBalance } a: me { userID } b: me { email } }'), undefined),
    ).toBe('creditAnalysis,me');
    expect(operationLabel(parse('query A { me { userID } } query B { organization { organizationName } }'), 'B')).toBe(
      'organization',
    );
    expect(operationLabel(parse('query A { me { userID } } query B { organization { organizationName } }'), 'C')).toBe(
      'none',
    );
    expect(operationLabel(parse('{ ...F } fragment F on Query { me { userID } }'), undefined)).toBe('fragment');
  });
});
