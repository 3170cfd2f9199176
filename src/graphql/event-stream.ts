import { createSourceEventStream, execute, getOperationAST, type DocumentNode } from 'graphql';
import type { RequestContext } from '../context.js';
import { drained, type Exchange } from '../exchange.js';
import { LiveSubscription, type LiveSink } from '../live/live-updates.js';
import { serialiseResult } from './http.js';
import { operationLabel, startDocumentSpan } from './observe.js';
import { endSpan } from '../ops/tracing.js';
import type { GraphQLParams } from './persisted.js';
import { releaseRequestCaches, type GraphQLPipeline } from './pipeline.js';
import { schema } from './schema.js';

/*
 * Subscriptions over Server-Sent Events on node:http (GraphQL over SSE, distinct connections, in
 * Yoga's framing). Yoga holds about 50 KB a stream; this holds the response, the document and the
 * flags, and executes the selection on each push as graphql-js does. Anything that is not a
 * subscription, or fails before its resolver runs, goes to the full server (`live/README.md`).
 */

/** Yoga's keep-alive: a comment every 12 seconds (proxies close a quiet connection). */
const PING_MS = 12_000;
const PING = ':\n\n';
const COMPLETE = 'event: complete\ndata:\n\n';

/** Exactly `Accept: text/event-stream` (with parameters): what streaming clients send. */
const EVENT_STREAM_ONLY = /^\s*text\/event-stream\s*(?:;[^,]*)?$/i;

export function wantsEventStream(exchange: Exchange): boolean {
  const accept = exchange.header('accept');
  return accept !== undefined && EVENT_STREAM_ONLY.test(accept);
}

/** One open stream: what a push needs, nothing of the opening request; methods, not closures. */
class EventStream implements LiveSink<unknown> {
  constructor(
    readonly exchange: Exchange,
    readonly document: DocumentNode,
    readonly params: GraphQLParams,
    readonly renew: () => RequestContext,
    private readonly streams: StreamsState,
  ) {}

  /** Executes the operation's selection on the subscription's answer, in a new context, and sends it. */
  async push(payload: unknown): Promise<void> {
    const { exchange, document, params } = this;
    const { response } = exchange;
    try {
      const contextValue = Object.assign({ exchange, params }, this.renew());
      const result = await execute({
        schema,
        document,
        rootValue: payload,
        contextValue,
        variableValues: params.variables,
        operationName: params.operationName,
      });
      if (response.destroyed) return;
      // Not read for LIVE_STALL_MS: the connection goes, and the subscription with it.
      if (
        !response.write(
          `event: next\ndata: ${serialiseResult(this.streams.pipeline.settle(contextValue, result))}\n\n`,
        ) &&
        !(await drained(response, this.streams.stallMs))
      )
        response.destroy();
    } catch {
      response.destroy();
    }
  }

  end(error?: unknown): void {
    const { response } = this.exchange;
    if (error !== undefined) response.destroy();
    else if (!response.destroyed) response.end(COMPLETE);
  }
}

/** What every stream shares: the pipeline and the stall bound. */
type StreamsState = { pipeline: GraphQLPipeline; stallMs: number };

export type EventStreams = {
  /** Opens the request's subscription as an event stream; false when the full server should answer. */
  serve(exchange: Exchange, params: GraphQLParams): Promise<boolean>;
  close(): void;
};

export function createEventStreams(pipeline: GraphQLPipeline, options: { stallMs: number }): EventStreams {
  const shared: StreamsState = { pipeline, stallMs: options.stallMs };
  const streams = new Set<EventStream>();
  let pinger: NodeJS.Timeout | undefined;

  /** One timer for every stream's keep-alive; a stream under backpressure is skipped. */
  function ping(): void {
    for (const stream of streams) {
      const { response } = stream.exchange;
      if (!response.writableNeedDrain && !response.destroyed) response.write(PING);
    }
  }

  return {
    async serve(exchange, params) {
      if (params.query == null) return false;
      const enveloped = pipeline.getEnveloped({ exchange, params } as never);
      let document: DocumentNode;
      try {
        document = enveloped.parse(params.query);
      } catch {
        return false;
      }
      if (enveloped.validate(enveloped.schema, document).length > 0) return false;
      if (getOperationAST(document, params.operationName)?.operation !== 'subscription') return false;
      const contextValue = await enveloped.contextFactory();
      const source = await createSourceEventStream({
        schema: enveloped.schema,
        document,
        contextValue,
        variableValues: params.variables,
        operationName: params.operationName,
      });
      releaseRequestCaches(contextValue);
      if (!(source instanceof LiveSubscription) && Symbol.asyncIterator in source) {
        // A source of another kind: the full server iterates it.
        await source[Symbol.asyncIterator]().return?.();
        return false;
      }
      exchange.record.operation = operationLabel(document, params.operationName);
      // Events are never revalidated: the detector of the parent's secret is not needed, and not kept.
      exchange.record.carriesSecret = undefined;
      const { response } = exchange;
      if (!(source instanceof LiveSubscription)) {
        // Refused (a caller that may not subscribe, too many subscriptions, low memory): said as
        // Yoga says it, one event and the end, status 200.
        exchange.startStream(200, 'text/event-stream', { 'Cache-Control': 'no-cache' });
        response.end(
          `${PING}event: next\ndata: ${serialiseResult(pipeline.settle(contextValue, source))}\n\n${COMPLETE}`,
        );
        return true;
      }
      if (response.destroyed) {
        source.cancel();
        return true;
      }
      // The stream's span lasts as long as the stream.
      const span = startDocumentSpan(document, params.operationName, 'stream');
      const stream = new EventStream(exchange, document, params, (contextValue as RequestContext).renew, shared);
      exchange.startStream(200, 'text/event-stream', { 'Cache-Control': 'no-cache' });
      response.write(PING);
      streams.add(stream);
      pinger ??= setInterval(ping, PING_MS).unref();
      // `on`, not `once` (a response closes once; `once` would keep a wrapper for the stream's life).
      response.on('close', () => {
        source.cancel();
        endSpan(span);
        streams.delete(stream);
        if (streams.size > 0) return;
        clearInterval(pinger);
        pinger = undefined;
      });
      source.start(stream);
      return true;
    },
    close() {
      clearInterval(pinger);
    },
  };
}
