import type { IncomingMessage, ServerResponse } from 'node:http';
import { ClientClosedError, PayloadTooLargeError, type ApiError } from '../errors.js';
import type { ResponseOptions } from '../rest/http.js';
import type { GraphQLHandler } from './yoga.js';
import { acceptsGzip, CompressedPayload } from '../compression.js';

/*
 * GraphQL over HTTP at /graphql, served by Yoga through its public Node entry,
 * `handleNodeRequestAndResponse`: every request (POST and GET, any Accept list, GraphiQL,
 * preflight) runs Yoga's whole pipeline, onRequest and onResponse hooks included, so that a
 * plugin (metrics, tracing) sees all of them. Around it, the app keeps what it owns: the body is
 * read here first and capped (MAX_BODY_BYTES), and the answer is written here whole with its own
 * framing and the app's headers (request id, rate limits).
 */

async function readBody(request: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) throw new PayloadTooLargeError();
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of request as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) throw new PayloadTooLargeError();
      chunks.push(chunk);
    }
  } catch (error) {
    // A client that hangs up mid-body is not a server error: there is nobody to answer.
    if (!(error instanceof PayloadTooLargeError) && (request.destroyed || request.socket.destroyed)) throw new ClientClosedError();
    throw error;
  }
  return Buffer.concat(chunks);
}

/**
 * Headers of Yoga's answer that describe its own connection or framing, not the content. The
 * answer is written here whole, with its own Content-Length; Node frames it and owns the
 * connection (Connection: close while draining). Yoga marks event streams `Content-Encoding:
 * none`, which is no encoding at all.
 */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'proxy-connection', 'upgrade', 'te', 'trailer']);

/** HTML pages at least this large are sent gzipped to clients that accept it (GraphiQL: megabytes). */
const COMPRESS_HTML_FROM_BYTES = 64 * 1024;

/**
 * The one large page this endpoint serves (GraphiQL, rendered once), gzipped once: a different
 * page is compressed anew.
 */
let compressedPage: CompressedPayload | undefined;

async function compressedHtml(payload: Buffer, contentType: string | undefined, acceptEncoding: string | undefined): Promise<Buffer | undefined> {
  if (payload.length < COMPRESS_HTML_FROM_BYTES || !/^\s*text\/html/i.test(contentType ?? '') || !acceptsGzip(acceptEncoding)) return undefined;
  if (!compressedPage || !compressedPage.raw.equals(payload)) compressedPage = new CompressedPayload(payload);
  return compressedPage.gzip();
}

function send(response: ServerResponse, status: number, headers: Iterable<[string, string]>, payload: Buffer, options: ResponseOptions) {
  response.statusCode = status;
  for (const [name, value] of headers) {
    const lower = name.toLowerCase();
    if (CONNECTION_HEADERS.has(lower) || (lower === 'content-encoding' && /^\s*(none|identity)\s*$/i.test(value))) continue;
    response.setHeader(name, value);
  }
  for (const [name, value] of Object.entries(options.headers ?? {})) response.setHeader(name, value);
  response.setHeader('X-Request-Id', options.requestId);
  response.setHeader('Content-Length', payload.length);
  response.end(payload);
}

/**
 * A refusal made before Yoga runs (body or headers too large, rate limited, malformed request), in
 * the shape GraphQL clients read: `{ errors: [{ message, extensions: { code } }] }`.
 */
export function sendGraphQLError(response: ServerResponse, error: ApiError, options: ResponseOptions): void {
  if (options.observed) options.observed.code = error.code;
  const payload = Buffer.from(JSON.stringify({ errors: [{ message: error.message, extensions: { code: error.code } }] }));
  send(response, error.status, [['Content-Type', 'application/json; charset=utf-8']], payload, options);
}

/** JSON media types Yoga reads a POSTed operation from. */
const JSON_BODY = /^\s*application\/(graphql\+)?json\s*(;|$)/i;

/**
 * The body as handed to Yoga's Node adapter: a JSON operation already parsed, as body-parsing
 * frameworks pass it (the adapter answers `request.json()` with it), and any other body as its text
 * (the adapter enumerates a string's characters before using it: a cost per byte on every request).
 * A JSON body that does not parse to an object with members stays text, so that Yoga reports it
 * exactly as it reports any malformed operation.
 */
function parsedBody(request: IncomingMessage, body: Buffer): string | Record<string, unknown> {
  const text = body.toString('utf8');
  if (!JSON_BODY.test(request.headers['content-type'] ?? '')) return text;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  const members = parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) && Object.keys(parsed).length > 0;
  return members ? (parsed as Record<string, unknown>) : text;
}

export function createGraphQLServer(graphql: GraphQLHandler, maxBodyBytes: number) {
  /** `url`: the request target as sent, whose path is exactly the GraphQL endpoint. */
  return async function serveGraphQL(request: IncomingMessage, response: ServerResponse, url: URL, options: ResponseOptions) {
    const method = request.method ?? 'GET';
    // GET carries the operation in the query string: the same bound as a POSTed body.
    if (url.search.length > maxBodyBytes) throw new PayloadTooLargeError('The GraphQL request in the query string is too large.');
    const body = method === 'GET' || method === 'HEAD' ? undefined : await readBody(request, maxBodyBytes);
    // The body already read goes with the request, as body-parsing frameworks hand it to the
    // adapter (an empty one: the request itself, whose stream has ended).
    const nodeRequest = body?.length ? { method, url: request.url, headers: request.headers, socket: request.socket, body: parsedBody(request, body) } : request;
    const answer = await graphql.handleNodeRequestAndResponse(nodeRequest, response, { requestId: options.requestId, observed: options.observed ?? {} });
    const answerHeaders: [string, string][] = [];
    answer.headers.forEach((value, name) => answerHeaders.push([name, value]));
    const payload = Buffer.from(await answer.arrayBuffer());
    const gzipped = await compressedHtml(payload, answer.headers.get('content-type') ?? undefined, request.headers['accept-encoding']);
    if (gzipped) {
      answerHeaders.push(['Content-Encoding', 'gzip'], ['Vary', 'Accept-Encoding']);
      return send(response, answer.status, answerHeaders, gzipped, options);
    }
    return send(response, answer.status, answerHeaders, payload, options);
  };
}
