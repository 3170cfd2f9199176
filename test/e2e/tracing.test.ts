import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { openDatabase, type Database } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { EXPORT_PATH } from '../../src/rest/export.js';
import { createTestDatabase, testMode, type TestDatabase } from '../helpers/database.js';
import { metricValue } from '../helpers/app.js';
import { baseEnv, listening, run, type Run } from '../helpers/processes.js';
import { ancestors, attribute, Receiver, traceparent } from '../helpers/otlp.js';

/*
 * OpenTelemetry traces from a real server, configured only by the standard OTEL_* variables, sent
 * to an OTLP/HTTP receiver in this test that decodes what the SDK's exporter sends. A request
 * with a W3C `traceparent` arrives as one trace under the caller's span: the HTTP server span,
 * the GraphQL operation's span under it, the database statements under that; on both GraphQL
 * transports and on REST. No credential, secret, email or search term is in any of it.
 */

const SEARCH = 'zq-secret-search-term';
const QUERY = `query Dashboard($search: String) { me { userID } childAccounts(search: $search, limit: 5) { stats { total } edges { node { id email } } } creditAnalysis { creditBalance } }`;

type Seeded = { token: string; publicKey: string; jwtSecret: string; emails: string[]; paginationSecret: string };

async function seedOrganization(database: Pick<Database, 'prisma' | 'sql'>): Promise<Omit<Seeded, 'paginationSecret'>> {
  const [organization] = await seed(database, {
    organizations: 1,
    childrenPerOrganization: 20,
    seed: 7,
    now: new Date(),
  });
  const parentId = organization!.parent.userID;
  const { jwtSecret } = await database.prisma.organization.findUniqueOrThrow({ where: { parentId } });
  const accounts = await database.sql.query<{ email: string }>(
    'SELECT email FROM "Account" WHERE id = $1 OR "parentId" = $1',
    [parentId],
  );
  const token = await mintAccessToken({
    secret: jwtSecret,
    kid: organization!.parent.publicKey,
    subject: parentId,
    ttlSeconds: 3600,
  });
  return {
    token,
    publicKey: organization!.parent.publicKey,
    jwtSecret,
    emails: accounts.map((account) => account.email),
  };
}

describe(`OpenTelemetry traces from a real server (${testMode})`, () => {
  const receiver = new Receiver();
  const folders: string[] = [];
  const databases: TestDatabase[] = [];
  const servers: Run[] = [];
  let where: NodeJS.ProcessEnv;
  let seeded: Seeded;

  beforeAll(async () => {
    await receiver.start();
    const paginationSecret = randomBytes(24).toString('hex');
    if (testMode === 'postgres') {
      const database = await createTestDatabase();
      databases.push(database);
      seeded = { ...(await seedOrganization(database)), paginationSecret };
      where = { DATABASE_URL: database.url };
    } else {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'tracing-'));
      folders.push(dataDir);
      const database = await openDatabase({ dataDir });
      await migrate(database.sql);
      seeded = { ...(await seedOrganization(database)), paginationSecret };
      await database.close();
      where = { DATA_DIR: dataDir };
    }
  }, 120_000);

  afterAll(async () => {
    for (const server of servers) {
      if (server.child.exitCode === null) server.child.kill('SIGKILL');
      await server.exited;
    }
    receiver.close();
    for (const database of databases) await database.close();
    for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  });

  async function start(otel: NodeJS.ProcessEnv): Promise<{ base: string; server: Run }> {
    // One server at a time on the embedded database's folder: one a failed test left is stopped.
    for (const left of servers) {
      if (left.child.exitCode === null) left.child.kill('SIGKILL');
      await left.exited;
    }
    const server = run(
      'dist/main.js',
      baseEnv({
        ...where,
        PAGINATION_SECRET: seeded.paginationSecret,
        LOG_LEVEL: 'info',
        LOG_FORMAT: 'json',
        SHUTDOWN_DELAY_MS: '0',
        OTEL_BSP_SCHEDULE_DELAY: '100',
        ...otel,
      }),
    );
    servers.push(server);
    return { base: await listening(server), server };
  }

  it('a traced request of each transport arrives as one trace under the caller, spans nested, logs joined, no secret in any of it', async () => {
    const { base, server } = await start({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'credits-api-under-test',
    });
    const auth = { authorization: `Bearer ${seeded.token}` };

    // The lean transport: a JSON operation by POST, its search term in the variables.
    const lean = traceparent();
    const leanAnswer = await fetch(`${base}/graphql`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', traceparent: lean.header },
      body: JSON.stringify({ query: QUERY, operationName: 'Dashboard', variables: { search: SEARCH } }),
    });
    expect(leanAnswer.status).toBe(200);
    expect(((await leanAnswer.json()) as { errors?: unknown }).errors).toBeUndefined();

    // The full server (Yoga): the document as an application/graphql body, the search term a literal
    // in it (each request searches for another term: what one read is cached for the next).
    const full = traceparent();
    const fullAnswer = await fetch(`${base}/graphql`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/graphql', accept: 'application/json', traceparent: full.header },
      body: QUERY.replace('query Dashboard($search: String)', 'query Literal').replace(
        '$search',
        JSON.stringify(`${SEARCH}-full`),
      ),
    });
    expect(fullAnswer.status).toBe(200);
    expect(((await fullAnswer.json()) as { errors?: unknown }).errors).toBeUndefined();

    // REST, the search term in the query string; and the export, a span of its own.
    const rest = traceparent();
    const restAnswer = await fetch(`${base}/auth/child-accounts?search=${SEARCH}-rest&limit=5`, {
      headers: { ...auth, traceparent: rest.header },
    });
    expect(restAnswer.status).toBe(200);
    const exported = traceparent();
    const exportAnswer = await fetch(`${base}${EXPORT_PATH}?format=ndjson&search=${SEARCH}`, {
      headers: { ...auth, traceparent: exported.header },
    });
    expect(exportAnswer.status).toBe(200);
    await exportAnswer.text();

    // A live stream of the credit analysis, ended by the client.
    const streamed = traceparent();
    const abort = new AbortController();
    const stream = await fetch(`${base}/graphql`, {
      method: 'POST',
      headers: {
        ...auth,
        'content-type': 'application/json',
        accept: 'text/event-stream',
        traceparent: streamed.header,
      },
      body: JSON.stringify({ query: 'subscription Live { creditAnalysisChanged { creditBalance } }' }),
      signal: abort.signal,
    });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    let events = '';
    while (!events.includes('event: next')) events += new TextDecoder().decode((await reader.read()).value);
    abort.abort();

    for (const { traceId, parentId, method, route, operation, answer } of [
      { ...lean, method: 'POST', route: '/graphql', operation: 'query Dashboard', answer: 'execution' },
      { ...full, method: 'POST', route: '/graphql', operation: 'query Literal', answer: 'execution' },
      { ...rest, method: 'GET', route: '/auth/child-accounts', operation: undefined, answer: undefined },
    ]) {
      const spans = await receiver.trace(
        traceId,
        (received) =>
          received.some((span) => span.kind === 2) && received.some((span) => span.name.startsWith('pg.query')),
      );
      // One server span, the caller's span its parent.
      const servers = spans.filter((span) => span.kind === 2);
      expect(servers, route).toHaveLength(1);
      const request = servers[0]!;
      expect(request.parentSpanId).toBe(parentId);
      expect(request.name).toBe(`${method} ${route}`);
      expect(attribute(request, 'http.route')).toBe(route);
      expect(attribute(request, 'http.response.status_code')).toBe(200);
      expect(attribute(request, 'url.path')).toBe(route);
      expect(
        Number(attribute(request, 'app.cache.hits')) + Number(attribute(request, 'app.cache.misses')),
      ).toBeGreaterThan(0);
      // Every other span of the trace is under the server span.
      for (const span of spans)
        if (span !== request)
          expect(
            ancestors(spans, span).map((parent) => parent.spanId),
            span.name,
          ).toContain(request.spanId);
      const statements = spans.filter((span) => span.name.startsWith('pg.query'));
      expect(statements.length).toBeGreaterThan(0);
      for (const statement of statements)
        expect(String(attribute(statement, 'db.query.text'))).toMatch(/^(SELECT|WITH)/i);
      if (operation) {
        // The operation's span under the request's, and the statements under the operation's.
        const graphql = spans.find((span) => span.name === operation);
        expect(graphql, JSON.stringify(spans.map((span) => span.name))).toBeDefined();
        expect(graphql!.parentSpanId).toBe(request.spanId);
        expect(attribute(graphql!, 'graphql.operation.type')).toBe('query');
        expect(attribute(graphql!, 'graphql.operation.name')).toBe(operation.split(' ')[1]);
        expect(attribute(graphql!, 'app.graphql.answer')).toBe(answer);
        expect(attribute(graphql!, 'app.graphql.fields')).toBe('childAccounts,creditAnalysis,me');
        // The caller is verified before the operation runs (its reads are the request's); the operation's own
        // reads are under it.
        expect(statements.filter((statement) => ancestors(spans, statement).includes(graphql!)).length).toBeGreaterThan(
          0,
        );
      }
    }

    // The export's span, under the request's, its reads under it.
    const exportSpans = await receiver.trace(exported.traceId, (received) =>
      received.some((span) => span.name === 'export child accounts'),
    );
    const exportSpan = exportSpans.find((span) => span.name === 'export child accounts')!;
    expect(exportSpans.find((span) => span.spanId === exportSpan.parentSpanId)?.kind).toBe(2);
    expect(attribute(exportSpan, 'app.export.format')).toBe('ndjson');
    expect(
      exportSpans.filter(
        (span) => span.name.startsWith('pg.query') && ancestors(exportSpans, span).includes(exportSpan),
      ).length,
    ).toBeGreaterThan(0);

    // The stream's span, ended when the client left.
    const streamSpans = await receiver.trace(streamed.traceId, (received) =>
      received.some((span) => span.name === 'subscription Live'),
    );
    const streamSpan = streamSpans.find((span) => span.name === 'subscription Live')!;
    expect(attribute(streamSpan, 'app.graphql.answer')).toBe('stream');
    expect(streamSpans.find((span) => span.spanId === streamSpan.parentSpanId)?.kind).toBe(2);

    // The resource names the service as OTEL_SERVICE_NAME says.
    expect(receiver.text()).toContain('credits-api-under-test');

    // No credential, secret, email or search term anywhere in what was exported.
    const exportedText = receiver.text();
    for (const secret of [
      seeded.token,
      seeded.token.split('.')[2]!,
      seeded.jwtSecret,
      seeded.publicKey,
      seeded.paginationSecret,
      SEARCH,
      ...seeded.emails,
    ]) {
      expect(exportedText.includes(secret), `a span carries ${secret.slice(0, 12)}…`).toBe(false);
    }

    // The request's log line joins its trace: the trace id and the server span's id.
    const leanRequest = receiver.spans.find((span) => span.traceId === lean.traceId && span.kind === 2)!;
    const line = server
      .output()
      .split('\n')
      .find((text) => text.includes(lean.traceId) && text.includes('"message":"request"'));
    expect(line, server.output().slice(0, 3000)).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({
      trace_id: lean.traceId,
      span_id: leanRequest.spanId,
      route: '/graphql',
      status: 200,
    });

    // The spans sent are counted: handed to the queue, and exported.
    const scrape = traceparent();
    const metrics = await (await fetch(`${base}/metrics`, { headers: { traceparent: scrape.header } })).text();
    expect(metricValue(metrics, 'api_trace_spans_total{outcome="exported"}')).toBeGreaterThan(0);
    expect(metricValue(metrics, 'api_trace_spans_ended_total')).toBeGreaterThanOrEqual(
      metricValue(metrics, 'api_trace_spans_total{outcome="exported"}'),
    );
    expect(metricValue(metrics, 'api_trace_spans_total{outcome="failed"}')).toBe(0);

    // A request its caller did not sample: nothing of it is exported. And an answer that counts a
    // retrieval, whose count is written after the request (at the latest when the process stops).
    const unsampled = traceparent();
    const skipped = await fetch(`${base}/auth/organization-details`, {
      headers: { ...auth, traceparent: unsampled.header.replace(/-01$/, '-00') },
    });
    expect(skipped.status).toBe(200);
    const counted = traceparent();
    expect(
      (await fetch(`${base}/auth/organization-details`, { headers: { ...auth, traceparent: counted.header } })).status,
    ).toBe(200);
    await receiver.trace(counted.traceId, (received) => received.some((span) => span.kind === 2));

    // The last spans are sent at shutdown, and the process exits 0.
    server.child.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    expect(receiver.spans.filter((span) => span.traceId === unsampled.traceId)).toEqual([]);
    // Every span belongs to a request's trace: work outside requests (the retrieval count's write) starts none.
    const traces = new Set([lean, full, rest, exported, streamed, scrape, counted].map((context) => context.traceId));
    expect(
      receiver.spans
        .filter((span) => !traces.has(span.traceId))
        .map((span) => `${span.name} ${span.traceId} ${span.parentSpanId}`),
    ).toEqual([]);
  }, 120_000);

  it('answers from a compiled plan and from a shared answer held say so in their operation span', async () => {
    const { base, server } = await start({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    });
    const ask = async (query: string) => {
      const context = traceparent();
      const response = await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${seeded.token}`,
          'content-type': 'application/json',
          traceparent: context.header,
        },
        body: JSON.stringify({ query }),
      });
      expect(response.status).toBe(200);
      await response.text();
      return context.traceId;
    };
    // Different variables each time (none are kept) until the document runs compiled.
    const sources = new Set<string>();
    for (let i = 0; i < 30; i++) {
      const traceId = await ask(`query Page { childAccounts(limit: ${1 + (i % 5)}) { stats { total } } }`);
      const spans = await receiver.trace(traceId, (received) => received.some((span) => span.name === 'query Page'));
      sources.add(
        String(
          attribute(
            spans.find((span) => span.name === 'query Page')!,
            'app.graphql.answer',
          ),
        ),
      );
    }
    expect(sources).toContain('execution');
    // The organization again and again: served as its readers' shared answer once it is held.
    for (let i = 0; i < 5; i++) {
      const traceId = await ask('query Org { organization { organizationName } }');
      const spans = await receiver.trace(traceId, (received) => received.some((span) => span.name === 'query Org'));
      sources.add(
        String(
          attribute(
            spans.find((span) => span.name === 'query Org')!,
            'app.graphql.answer',
          ),
        ),
      );
    }
    expect(sources).toContain('kept');
    server.child.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
  }, 120_000);

  it('the sampler the environment names decides before any span: a ratio keeps the traces its trace ids select, and a parent-based one follows the caller', async () => {
    // The SDK's rule for a ratio: the four 32-bit words of the trace id, xor-ed, below ratio × 2^32.
    const selected = (traceId: string, ratio: number) => {
      let accumulated = 0;
      for (let i = 0; i < 32; i += 8) accumulated = (accumulated ^ parseInt(traceId.slice(i, i + 8), 16)) >>> 0;
      return accumulated < Math.floor(ratio * 0xffffffff);
    };
    const roots = (from: number) =>
      receiver.spans.slice(from).filter((span) => span.kind === 2 && span.parentSpanId === undefined);
    const ask = (base: string, headers: Record<string, string> = {}) =>
      fetch(`${base}/healthz`, { headers }).then((response) => response.text());

    // traceidratio ignores the caller's flag and samples by the trace id; its own roots take the id their
    // sampling was decided on.
    const ratio = await start({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_TRACES_SAMPLER: 'traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.5',
    });
    const from = receiver.spans.length;
    const callers = Array.from({ length: 40 }, () => traceparent()).map((caller, i) => ({
      ...caller,
      header: i % 2 ? caller.header : caller.header.replace(/-01$/, '-00'),
    }));
    for (const caller of callers) await ask(ratio.base, { traceparent: caller.header });
    for (let i = 0; i < 60; i++) await ask(ratio.base);
    ratio.server.child.kill('SIGTERM');
    expect((await ratio.server.exited).code).toBe(0);
    const traced = new Set(
      receiver.spans
        .slice(from)
        .filter((span) => span.kind === 2)
        .map((span) => span.traceId),
    );
    for (const caller of callers) expect(traced.has(caller.traceId), caller.header).toBe(selected(caller.traceId, 0.5));
    const own = roots(from);
    expect(own.length).toBeGreaterThan(10);
    expect(own.length).toBeLessThan(50);
    for (const span of own) expect(selected(span.traceId, 0.5), span.traceId).toBe(true);

    // parentbased_traceidratio at 0: its own requests never, a caller's sampled trace always.
    const parentBased = await start({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0',
    });
    const before = receiver.spans.length;
    const caller = traceparent();
    for (let i = 0; i < 20; i++) await ask(parentBased.base);
    await ask(parentBased.base, { traceparent: caller.header });
    await ask(parentBased.base, { traceparent: traceparent().header.replace(/-01$/, '-00') });
    parentBased.server.child.kill('SIGTERM');
    expect((await parentBased.server.exited).code).toBe(0);
    expect(receiver.spans.slice(before).map((span) => span.traceId)).toEqual([caller.traceId]);
  }, 120_000);

  it('by default the exporter speaks OTLP/HTTP with protobuf; a collector that is down costs failed exports, counted; OTEL_SDK_DISABLED turns it off', async () => {
    const { base, server } = await start({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });
    const context = traceparent();
    const before = receiver.bodies.length;
    expect((await fetch(`${base}/healthz`, { headers: { traceparent: context.header } })).status).toBe(200);
    server.child.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    const sent = receiver.bodies.slice(before);
    expect(sent.map((entry) => entry.contentType)).toContain('application/x-protobuf');
    // The trace id travels as its 16 bytes.
    expect(sent.some((entry) => entry.body.includes(Buffer.from(context.traceId, 'hex')))).toBe(true);

    // A collector that is down: the spans are counted as failed, said once in the log, and the server answers as ever.
    const down = await start({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_TIMEOUT: '500' });
    expect((await fetch(`${down.base}/healthz`, { headers: { traceparent: traceparent().header } })).status).toBe(200);
    let failed = 0;
    for (let i = 0; i < 100 && !(failed > 0); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      failed = metricValue(
        await (await fetch(`${down.base}/metrics`)).text(),
        'api_trace_spans_total{outcome="failed"}',
      );
    }
    expect(failed).toBeGreaterThan(0);
    expect(down.server.output()).toContain('spans could not be exported to the OpenTelemetry collector');
    down.server.child.kill('SIGTERM');
    expect((await down.server.exited).code).toBe(0);

    const off = await start({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SDK_DISABLED: 'true' });
    const silent = receiver.bodies.length;
    expect((await fetch(`${off.base}/healthz`, { headers: { traceparent: traceparent().header } })).status).toBe(200);
    off.server.child.kill('SIGTERM');
    expect((await off.server.exited).code).toBe(0);
    expect(receiver.bodies.length).toBe(silent);
    expect(off.server.output()).not.toContain('trace_id');
  }, 120_000);
});
