import { createRequire } from 'node:module';
import type { IncomingMessage } from 'node:http';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { TracingSettings } from './tracing-settings.js';
import { timeBound } from '../db/capture/feed.js';
import {
  context,
  INVALID_SPAN_CONTEXT,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

/*
 * OpenTelemetry traces (src/ops/README.md, "Tracing"), off unless an OTLP endpoint is set; off, the
 * SDK is never loaded. A span carries no header but the user agent, no query string, document,
 * variables or statement values: they can hold a search term or an email.
 */

export type { Span };

const TRACER = 'credits-read-api';
/** The longest operation name a span carries (GraphQL names are short identifiers; a hostile one is not). */
const MAX_NAME = 100;
const MAX_USER_AGENT = 256;
const FLUSH_MS = 2000;

let active = false;
/** Whether a request whose caller's context is `parent` is sampled: the configured sampler's answer. */
let decide: (parent: Context) => boolean = () => false;
/** The trace id a root's sampling was decided on, taken by the span made next (synchronously). */
let decidedTraceId: string | undefined;

/** Sampled spans since the start: ended, exported, refused by the collector (`api_trace_*`). */
export const spanCounts = { ended: 0, exported: 0, failed: 0 };
let shutdownProvider: (() => Promise<void>) | undefined;

export function tracingActive(): boolean {
  return active;
}

/** Starts the SDK when the settings ask for it (exporter, sampler, a bounded batch queue, pg and Prisma spans). */
export async function startTracing(
  settings: TracingSettings,
  options: { version?: string; warn?: (message: string, fields: Record<string, unknown>) => void } = {},
): Promise<void> {
  if (!settings.enabled || active) return;
  const version = options.version ?? '1.0.0';
  const [
    {
      NodeTracerProvider,
      BatchSpanProcessor,
      AlwaysOnSampler,
      AlwaysOffSampler,
      ParentBasedSampler,
      TraceIdRatioBasedSampler,
      RandomIdGenerator,
      SamplingDecision,
    },
    { ExportResultCode },
    resources,
    { registerInstrumentations },
    { PgInstrumentation },
    { PrismaInstrumentation },
  ] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-pg'),
    import('@prisma/instrumentation'),
  ]);
  const exporter =
    settings.protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': TRACER, 'service.version': version }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  /** Spans handed to the export queue, counted; what the queue drops is what never reaches `export`. */
  class CountedBatches extends BatchSpanProcessor {
    override onEnd(span: ReadableSpan): void {
      spanCounts.ended += 1;
      super.onEnd(span);
    }
  }
  let warned = 0;
  const counted: SpanExporter = {
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush(),
    export(spans, done) {
      exporter.export(spans, (result) => {
        if (result.code === ExportResultCode.SUCCESS) spanCounts.exported += spans.length;
        else {
          spanCounts.failed += spans.length;
          // Said at most once a minute: a collector that is down fails every batch.
          if (Date.now() - warned > 60_000) {
            warned = Date.now();
            options.warn?.(
              'spans could not be exported to the OpenTelemetry collector (counted in api_trace_spans_total{outcome="failed"})',
              { error: result.error?.message },
            );
          }
        }
        done(result);
      });
    },
  };
  // The environment's sampler decides before any span is made (`decide`); the provider samples
  // every span it is asked for, roots only once decided and children only under sampled spans.
  const name = settings.sampler;
  const root = name.endsWith('always_off')
    ? new AlwaysOffSampler()
    : name.endsWith('traceidratio')
      ? new TraceIdRatioBasedSampler(settings.ratio)
      : new AlwaysOnSampler();
  const sampler = name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
  const random = new RandomIdGenerator();
  decide = (parent) => {
    const remote = trace.getSpanContext(parent);
    const traceId = remote && isSpanContextValid(remote) ? remote.traceId : (decidedTraceId = random.generateTraceId());
    return (
      sampler.shouldSample(parent, traceId, '', SpanKind.SERVER, {}, []).decision ===
      SamplingDecision.RECORD_AND_SAMPLED
    );
  };
  const idGenerator = {
    // A root span takes the trace id its sampling was decided on.
    generateTraceId: () => {
      const traceId = decidedTraceId ?? random.generateTraceId();
      decidedTraceId = undefined;
      return traceId;
    },
    generateSpanId: () => random.generateSpanId(),
  };
  const provider = new NodeTracerProvider({
    resource,
    sampler: new AlwaysOnSampler(),
    idGenerator,
    spanProcessors: [new CountedBatches(counted)],
  });
  provider.register();
  registerInstrumentations({
    tracerProvider: provider,
    // Statements as sent, without their values. No span for a pool checkout: it would double what a
    // sampled request exports.
    instrumentations: [
      new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false, ignoreConnectSpans: true }),
    ],
  });
  // Enabled by hand, with our provider. One span a Prisma call: its other spans repeat pg's or are
  // parts of the call, and each costs its serialization.
  const prisma = new PrismaInstrumentation({
    enabled: false,
    ignoreSpanTypes: [
      'prisma:client:serialize',
      'prisma:client:db_query',
      'prisma:client:compile',
      'prisma:client:connect',
    ],
  });
  prisma.setTracerProvider(underSampledSpans(provider));
  prisma.enable();
  // `pg` is an ES import everywhere else, which the instrumentation's require hook does not see:
  // required once here, its classes are patched where everyone shares them (their prototypes).
  const require = createRequire(import.meta.url);
  require('pg');
  keepCallersContext(require('pg-pool') as PoolClass);
  active = true;
  shutdownProvider = () => provider.shutdown();
}

type PoolClass = { prototype: { connect: (this: unknown, callback?: (...args: unknown[]) => void) => unknown } };

/**
 * A busy pool runs a waiting query's callback in the context of whichever query released the
 * connection: bound always, so that work outside requests stays out of the requests' traces.
 */
function keepCallersContext(Pool: PoolClass): void {
  const connect = Pool.prototype.connect;
  Pool.prototype.connect = function (this: unknown, callback?: (...args: unknown[]) => void) {
    return connect.call(this, callback && context.bind(context.active(), callback));
  };
}

/** Exports what is still queued, within FLUSH_MS (the shutdown's last step). */
export async function stopTracing(): Promise<void> {
  const stop = shutdownProvider;
  shutdownProvider = undefined;
  active = false;
  decide = () => false;
  cachedTracer = undefined;
  if (!stop) return;
  await timeBound(stop(), FLUSH_MS, 'the last spans exported').catch(() => undefined);
}

let cachedTracer: Tracer | undefined;
const tracer = (): Tracer => (cachedTracer ??= trace.getTracer(TRACER));

/** Whether a span made now would be recorded; under an unsampled request ours are not made at all. */
export function recording(): boolean {
  return active && trace.getActiveSpan()?.isRecording() === true;
}

/** A span under the active one, or undefined when tracing is off or the request is not sampled. */
export function startSpan(name: string, attributes: Attributes, kind: SpanKind = SpanKind.INTERNAL): Span | undefined {
  if (!recording()) return undefined;
  return tracer().startSpan(name, { kind, attributes });
}

/** Runs `work` with `span` active; an unsampled request runs without an active context, which is what tracing costs. */
export function inSpan<T>(span: Span | undefined, work: () => T): T {
  return span === undefined ? work() : context.with(trace.setSpan(context.active(), span), work);
}

const NOT_RECORDED = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/**
 * Prisma's instrumentation has no `requireParentSpan`: through this provider its spans are made
 * only under a sampled span, so untraced calls cost nothing and start no traces.
 */
function underSampledSpans(provider: TracerProvider): TracerProvider {
  const sampled = (parent: Context) => trace.getSpan(parent)?.isRecording() === true;
  return {
    getTracer(name, version, options) {
      const real = provider.getTracer(name, version, options);
      const startActiveSpan = (spanName: string, ...rest: unknown[]): unknown => {
        const parent = (rest.length === 3 ? rest[1] : context.active()) as Context;
        if (sampled(parent)) return (real.startActiveSpan as (...args: unknown[]) => unknown)(spanName, ...rest);
        return (rest[rest.length - 1] as (span: Span) => unknown)(NOT_RECORDED);
      };
      return {
        startSpan: (spanName, spanOptions, parent = context.active()) =>
          sampled(parent) ? real.startSpan(spanName, spanOptions, parent) : NOT_RECORDED,
        startActiveSpan: startActiveSpan as Tracer['startActiveSpan'],
      };
    },
  };
}

/** Ends a span, as failed when `error` says why (a message of ours, never the error's own text). */
export function endSpan(span: Span | undefined, error?: string): void {
  if (span === undefined || !span.isRecording()) return;
  if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  span.end();
}

/** A name a span may carry: bounded, whatever the caller sent. */
export function boundedName(name: string): string {
  return name.length > MAX_NAME ? name.slice(0, MAX_NAME) : name;
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'CONNECT', 'TRACE']);

/** The server span of a request, a child of the caller's `traceparent`; undefined when not sampled. */
export function startRequestSpan(request: IncomingMessage, path: string, route: string | undefined): Span | undefined {
  if (!active) return undefined;
  // Most callers send no trace context, and most requests are not sampled: neither pays for a
  // span. An unsampled request makes none at all (what it would make is never exported).
  const parent =
    request.headers.traceparent === undefined ? ROOT_CONTEXT : propagation.extract(ROOT_CONTEXT, request.headers);
  if (!decide(parent)) {
    decidedTraceId = undefined;
    return undefined;
  }
  const method = request.method !== undefined && METHODS.has(request.method) ? request.method : '_OTHER';
  const named = method === '_OTHER' ? 'HTTP' : method;
  const userAgent = request.headers['user-agent'];
  const attributes: Attributes = {
    'http.request.method': method,
    'url.scheme': 'http',
    // The path only: the query string can hold a search term.
    'url.path': route ?? boundedName(path),
    'network.protocol.version': request.httpVersion,
  };
  if (route !== undefined) attributes['http.route'] = route;
  if (userAgent !== undefined) attributes['user_agent.original'] = userAgent.slice(0, MAX_USER_AGENT);
  return tracer().startSpan(
    route === undefined ? named : `${named} ${route}`,
    { kind: SpanKind.SERVER, attributes },
    parent,
  );
}

/** What a request's record holds that its server span reports when it ends. */
export type RequestOutcome = {
  status: number;
  requestId: string;
  code?: string | undefined;
  caller?: string | undefined;
  organizationId?: string | undefined;
  cacheLookups?: { hits: number; misses: number } | undefined;
  aborted?: boolean;
};

export function endRequestSpan(span: Span | undefined, outcome: RequestOutcome): void {
  if (span === undefined || !span.isRecording()) return;
  span.setAttribute('http.response.status_code', outcome.status);
  span.setAttribute('app.request.id', outcome.requestId);
  if (outcome.code) span.setAttribute('app.error.code', outcome.code);
  if (outcome.caller) span.setAttribute('app.caller.kind', outcome.caller);
  if (outcome.organizationId) span.setAttribute('app.organization.id', outcome.organizationId);
  if (outcome.cacheLookups) {
    span.setAttribute('app.cache.hits', outcome.cacheLookups.hits);
    span.setAttribute('app.cache.misses', outcome.cacheLookups.misses);
  }
  if (outcome.status >= 500) {
    span.setAttribute('error.type', String(outcome.status));
    span.setStatus({ code: SpanStatusCode.ERROR });
  } else if (outcome.aborted) {
    span.setAttribute('error.type', 'client_closed');
  }
  span.end();
}

/** The ids a log line carries to join its trace, if it is sampled. */
export function traceFields(
  span: Span | undefined = active ? trace.getActiveSpan() : undefined,
): { trace_id: string; span_id: string } | undefined {
  if (span === undefined || !span.isRecording()) return undefined;
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/** Where a GraphQL answer came from: a shared answer held, a compiled plan, or the whole pipeline. */
export type AnswerSource = 'kept' | 'plan' | 'execution';

/** A GraphQL operation's span (`graphql.operation.type` and `.name`, never the document). */
export function startOperationSpan(
  type: string,
  name: string | null | undefined,
  source: AnswerSource | 'stream',
  fields?: string,
): Span | undefined {
  if (!recording()) return undefined;
  const attributes: Attributes = { 'graphql.operation.type': type, 'app.graphql.answer': source };
  const bounded = name ? boundedName(name) : undefined;
  if (bounded) attributes['graphql.operation.name'] = bounded;
  if (fields) attributes['app.graphql.fields'] = fields;
  return tracer().startSpan(bounded ? `${type} ${bounded}` : type, { kind: SpanKind.INTERNAL, attributes });
}
