import { context, ROOT_CONTEXT, trace, type Span } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/db/database.js';
import { startTracing, stopTracing } from '../src/ops/tracing.js';
import { createTestDatabase, testMode, type TestDatabase } from './helpers/database.js';
import { Receiver, attribute } from './helpers/otlp.js';

/*
 * A busy pool hands a waiting statement the connection another released, and pg-pool runs the
 * waiting statement's callback where the release happened. Traced, each statement must still
 * belong to its own caller: the change feed's LISTEN or the retrieval counter's write, waiting
 * behind a request, is not one of the request's statements (and starts no trace of its own).
 */
describe(`traced statements waiting for a busy pool (${testMode})`, () => {
  const receiver = new Receiver();
  let created: TestDatabase;
  let database: Database;
  const variables = ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_PROTOCOL', 'OTEL_BSP_SCHEDULE_DELAY'] as const;
  const saved = variables.map((name) => process.env[name]);

  beforeAll(async () => {
    await receiver.start();
    Object.assign(process.env, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    await startTracing({ enabled: true, protocol: 'http/json', sampler: 'parentbased_always_on', ratio: 1 });
    created = await createTestDatabase();
    // One connection, so that the second statement has to wait for the first's (the embedded database has one anyway).
    database = created.url ? await openDatabase({ url: created.url, poolSize: 1 }) : created;
  }, 60_000);

  afterAll(async () => {
    await stopTracing();
    variables.forEach((name, i) =>
      saved[i] === undefined ? delete process.env[name] : (process.env[name] = saved[i]),
    );
    receiver.close();
    if (database !== created) await database.close();
    await created?.close();
  });

  const under = <T>(span: Span, work: () => T): T => context.with(trace.setSpan(ROOT_CONTEXT, span), work);

  it('a statement waiting for the connection a traced request releases is not in that request’s trace; one waiting under its own span stays in its own', async () => {
    const tracer = trace.getTracer('test');
    const request = tracer.startSpan('request');
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The request takes the only connection and keeps it until released.
    const holder = under(request, () =>
      database.sql.withConnection(async (connection) => {
        await connection.query('SELECT 1 AS held_by_the_request');
        holding();
        await gate;
      }),
    );
    await held;
    // Work outside any request waits for it; so does another request's statement, under its own span.
    const outside = database.sql.query('SELECT 2 AS outside_any_request');
    const other = tracer.startSpan('another request');
    const otherStatement = under(other, () => database.sql.query('SELECT 3 AS under_another_request'));
    release();
    await Promise.all([holder, outside, otherStatement]);
    request.end();
    other.end();

    const spans = await receiver.trace(request.spanContext().traceId, (received) =>
      received.some((span) => span.name === 'request'),
    );
    await receiver.trace(
      other.spanContext().traceId,
      (received) =>
        received.some((span) => span.name === 'another request') &&
        received.some((span) => span.name.startsWith('pg.query')),
    );
    const texts = (traceId: string) =>
      receiver.spans
        .filter((span) => span.traceId === traceId && span.name.startsWith('pg.query'))
        .map((span) => String(attribute(span, 'db.query.text')));
    expect(spans.length).toBeGreaterThan(0);
    expect(texts(request.spanContext().traceId)).toEqual(['SELECT 1 AS held_by_the_request']);
    expect(texts(other.spanContext().traceId)).toEqual(['SELECT 3 AS under_another_request']);
    // Outside a request no statement span is made at all.
    expect(
      receiver.spans.filter((span) => String(attribute(span, 'db.query.text')).includes('outside_any_request')),
    ).toEqual([]);
  }, 60_000);
});
