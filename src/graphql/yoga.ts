import { createYoga, useEnvelop, type Plugin } from 'graphql-yoga';
import type { Config } from '../config.js';
import { CompressedPayload, drained, type Exchange } from '../exchange.js';
import { revalidatable } from './http.js';
import { GRAPHIQL_DEFAULT_DOCUMENT } from './operations.js';
import { resolvePersistedOperation, type PersistedRule } from './persisted.js';
import type { GraphQLInitialContext, GraphQLPipeline } from './pipeline.js';

/*
 * The full GraphQL server (graphql-yoga) for what the lean transport does not take: GraphiQL, event
 * streams, multipart, form bodies, malformed requests. Same pipeline and error mask; the edge owns
 * CORS, limits and framing.
 */

/** Stored operations by id: the rule is persisted.ts', shared with the lean transport. */
function usePersistedOperations(rule: PersistedRule): Plugin<GraphQLInitialContext> {
  return {
    onParams({ params, setParams, context }) {
      setParams(
        resolvePersistedOperation(params, rule, (context as GraphQLInitialContext).exchange.record) as typeof params,
      );
    },
  };
}

/** Yoga's headers about its own connection or framing, which the edge owns. */
const CONNECTION_HEADERS = new Set(
  'connection keep-alive transfer-encoding content-length proxy-connection upgrade te trailer'.split(' '),
);

/** HTML pages at least this large are sent gzipped to clients that accept it (GraphiQL: megabytes). */
const COMPRESS_HTML_FROM_BYTES = 64 * 1024;

/** JSON media types Yoga reads a POSTed operation from. */
const JSON_BODY = /^\s*application\/(graphql\+)?json\s*(;|$)/i;

/**
 * The body as Yoga's Node adapter takes it: a JSON operation parsed, anything else as text (so that
 * Yoga reports a malformed one its own way).
 */
function parsedBody(contentType: string | undefined, body: Buffer): string | Record<string, unknown> {
  const text = body.toString('utf8');
  if (!JSON_BODY.test(contentType ?? '')) return text;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  const members =
    parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) && Object.keys(parsed).length > 0;
  return members ? (parsed as Record<string, unknown>) : text;
}

type JsonAnswer = { errors?: { extensions?: { code?: unknown } }[] } | null;

function parseAnswer(payload: Buffer): JsonAnswer | undefined {
  try {
    return JSON.parse(payload.toString('utf8')) as JsonAnswer;
  } catch {
    return undefined;
  }
}

export type YogaTransport = ReturnType<typeof createYogaTransport>;

export function createYogaTransport(
  pipeline: GraphQLPipeline,
  config: Config,
  options: { graphiqlHeaders?: string; persisted: PersistedRule },
) {
  let graphiqlPage: Promise<string> | undefined;
  /** The one large page this endpoint serves (GraphiQL, rendered once), gzipped once. */
  let compressedPage: CompressedPayload | undefined;
  const yoga = createYoga<GraphQLInitialContext>({
    graphqlEndpoint: '/graphql',
    graphiql: config.graphiql
      ? {
          title: 'Credits read API',
          defaultQuery: GRAPHIQL_DEFAULT_DOCUMENT,
          // A demo token in the headers tab: development only (see main.ts), never in production.
          ...(options.graphiqlHeaders && config.env === 'development' ? { headers: options.graphiqlHeaders } : {}),
        }
      : false,
    // GraphiQL's page and assets from the npm package, not from a CDN: it works offline. Loaded
    // on first use: the bundle is tens of megabytes in memory, and production serves no GraphiQL.
    renderGraphiQL: (graphiqlOptions) =>
      (graphiqlPage ??= import('@graphql-yoga/render-graphiql').then((module) =>
        module.renderGraphiQL(graphiqlOptions),
      )),
    landingPage: false,
    batching: false,
    parserAndValidationCache: false,
    // The body arrives already read and capped (MAX_BODY_BYTES, 413 at the edge).
    maxRequestBodySize: false,
    plugins: [useEnvelop(pipeline.getEnveloped as never), usePersistedOperations(options.persisted)],
    cors: false,
    logging: false,
    // For what fails outside execution (a thrown parse error, a refused parameter): the same mask.
    maskedErrors: { maskError: (error) => pipeline.maskError(error) },
  });

  /** Answers through Yoga: its whole HTTP path, then written by the edge with its framing. */
  async function serve(exchange: Exchange, body: Buffer | undefined): Promise<void> {
    const { request } = exchange;
    // The body already read goes with the request, as body-parsing frameworks hand it to the
    // adapter (an empty one: the request itself, whose stream has ended).
    const nodeRequest = body?.length
      ? {
          method: request.method,
          url: request.url,
          headers: request.headers,
          socket: request.socket,
          body: parsedBody(exchange.header('content-type'), body),
        }
      : request;
    const answer = await yoga.handleNodeRequestAndResponse(nodeRequest, exchange.response, { exchange });
    const contentType = answer.headers.get('content-type') ?? undefined;
    answer.headers.forEach((value, name) => {
      const lower = name.toLowerCase();
      if (
        lower === 'content-type' ||
        CONNECTION_HEADERS.has(lower) ||
        (lower === 'content-encoding' && /^\s*(none|identity)\s*$/i.test(value))
      )
        return;
      exchange.addHeader(name, value);
    });
    // A subscription's event stream: written as it comes, as fast as the client reads.
    if (answer.body && /^\s*text\/event-stream/i.test(contentType ?? ''))
      return streamEvents(exchange, answer.status, contentType!, answer.body);
    const payload: Buffer = Buffer.from(await answer.arrayBuffer());
    const page = /^\s*text\/html/i.test(contentType ?? '');
    const json = /json/i.test(contentType ?? '');
    // The JSON body, parsed once and only when asked for (the log's error code, revalidation).
    let read = false;
    let parsed: JsonAnswer | undefined;
    const answered = () => {
      if (!read) [read, parsed] = [true, parseAnswer(payload)];
      return parsed;
    };
    if (exchange.record.code === undefined && json && payload.length < 65_536) {
      const code = answered()?.errors?.[0]?.extensions?.code;
      exchange.record.code = typeof code === 'string' ? code : undefined;
    }
    // GraphiQL's page: the same bytes each time, compressed once.
    if (page) {
      if (!compressedPage || !compressedPage.raw.equals(payload)) compressedPage = new CompressedPayload(payload);
      return exchange.sendCompressible(answer.status, contentType!, compressedPage, COMPRESS_HTML_FROM_BYTES);
    }
    // Not a JSON object, or one with errors: not kept.
    if (json && revalidatable(exchange, answer.status, () => !answered() || answered()!.errors !== undefined)) {
      exchange.sendRevalidated(contentType!, payload);
      return;
    }
    exchange.send(answer.status, contentType, payload, { noStore: true });
  }

  /**
   * Writes an event stream a piece at a time once the socket took the last, so a client that does not
   * read is cut off after LIVE_STALL_MS; the client leaving ends the subscription.
   */
  async function streamEvents(
    exchange: Exchange,
    status: number,
    contentType: string,
    body: ReadableStream<Uint8Array>,
  ): Promise<void> {
    const { response } = exchange;
    exchange.startStream(status, contentType, {});
    const reader = body.getReader();
    const gone = () => void reader.cancel().catch(() => {});
    response.once('close', gone);
    let complete = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (response.destroyed) return;
        if (!response.write(value) && !(await drained(response, config.live.stallMs))) {
          // Not read for LIVE_STALL_MS: the connection goes, and the subscription with it.
          response.destroy();
          return;
        }
      }
      response.end();
      complete = true;
    } catch {
      response.destroy();
    } finally {
      response.off('close', gone);
      // Cut off or failed: the subscription ends now. (The connection's own 'close' comes later,
      // when nothing listens for it any more.)
      if (!complete) gone();
    }
  }

  return { yoga, serve };
}
