import type { IncomingMessage, ServerResponse } from 'node:http';
import { isAsyncIterable, processRegularResult } from 'graphql-yoga';
import { ClientClosedError, PayloadTooLargeError, type ApiError } from '../errors.js';
import type { ResponseOptions } from '../rest/http.js';
import type { GraphQLHandler } from './yoga.js';

/*
 * GraphQL over HTTP at /graphql, served by Yoga. The common request — one operation POSTed as JSON,
 * answered as JSON — is handed to Yoga's own steps directly: `parseRequest` (the request-parse
 * plugins: method check, batching limit, introspection switch; Yoga's JSON parser) and
 * `getResultForParams` (the operation pipeline: parameter checks, parse and validation caches,
 * limits, context, execution, masked errors). Skipped are only the server adapter around them —
 * wrapping into and out of fetch-API Request and Response objects, whose work on this path cost
 * about a third of the request's CPU (measured) — and its onRequest/onResponse hooks, which for
 * such a request only add CORS headers (the app sets its own on every answer). An answer with
 * errors is still written by Yoga's result processor; every other request (GET, other media
 * types, parameters Yoga would refuse, GraphiQL, preflight) takes Yoga's whole path.
 */

type MediaType = 'application/json' | 'application/graphql-response+json';

const PARAMETERS = new Set(['query', 'variables', 'operationName', 'extensions']);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The media type Yoga answers a single result with for this Accept list, when that is plain JSON:
 * as Yoga negotiates, the first entry (q-values ignored, charsets other than utf-8 skipped) that
 * a JSON type matches decides; `application/json` wins where both match (`*∕*`, `application/*`).
 * Undefined when no entry matches one (Yoga's own path answers those: event stream, 406, ...).
 */
function regularMediaType(accept: string | undefined): MediaType | undefined {
  if (accept === undefined) return 'application/json';
  for (const entry of accept.replace(/\s/g, '').toLowerCase().split(',')) {
    const [type = '', ...parameters] = entry.split(';');
    const charset = parameters.find((parameter) => parameter.includes('charset='));
    if (charset !== undefined && charset !== 'charset=utf-8') continue;
    if (type === '*/*' || type === 'application/*' || type === 'application/json') return 'application/json';
    if (type === 'application/graphql-response+json') return type;
  }
  return undefined;
}

/** Whether the body is one set of GraphQL parameters, each as Yoga accepts it (else Yoga answers). */
function isSingleJsonOperation(request: IncomingMessage, body: Buffer): boolean {
  // Yoga's rule for a JSON body: the first content type is application/json, with any parameters.
  const contentType = request.headers['content-type']?.split(',')[0];
  if (contentType !== 'application/json' && !contentType?.startsWith('application/json;')) return false;
  let params: unknown;
  try {
    params = JSON.parse(body.toString('utf8'));
  } catch {
    return false;
  }
  if (!isPlainObject(params) || typeof params.query !== 'string') return false;
  for (const key in params) if (params[key] != null && !PARAMETERS.has(key)) return false;
  return (
    (params.variables == null || isPlainObject(params.variables)) &&
    (params.operationName == null || typeof params.operationName === 'string') &&
    (params.extensions == null || isPlainObject(params.extensions))
  );
}

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

/** For Yoga's waitUntil: nothing of ours defers work past the answer. */
function ignoreSettled(promise: Promise<unknown> | unknown): void {
  void Promise.resolve(promise).catch(() => undefined);
}

/**
 * Headers of Yoga's answer that describe its own connection or framing, not the content. The
 * answer is written here whole, with its own Content-Length; Node frames it and owns the
 * connection (Connection: close while draining). Yoga marks event streams `Content-Encoding:
 * none`, which is no encoding at all.
 */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'proxy-connection', 'upgrade', 'te', 'trailer']);

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
  const payload = Buffer.from(JSON.stringify({ errors: [{ message: error.message, extensions: { code: error.code } }] }));
  send(response, error.status, [['Content-Type', 'application/json; charset=utf-8']], payload, options);
}

export function createGraphQLServer(graphql: GraphQLHandler, maxBodyBytes: number) {
  // Yoga's own Request and Headers (the lightweight ponyfill): Node's built-in ones cost far more.
  const { Request: YogaRequest, Headers: YogaHeaders } = graphql.fetchAPI;

  /** `url`: the request target as sent, whose path is exactly the GraphQL endpoint. */
  return async function serveGraphQL(request: IncomingMessage, response: ServerResponse, url: URL, options: ResponseOptions) {
    const method = request.method ?? 'GET';
    // GET carries the operation in the query string: the same bound as a POSTed body.
    if (url.search.length > maxBodyBytes) throw new PayloadTooLargeError('The GraphQL request in the query string is too large.');
    const body = method === 'GET' || method === 'HEAD' ? undefined : await readBody(request, maxBodyBytes);
    const headers = new YogaHeaders();
    for (const [name, value] of Object.entries(request.headers)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
    }
    const serverContext = { requestId: options.requestId };
    const yogaRequest = () => new YogaRequest(url, { method, headers, body: body?.toString('utf8') });
    const mediaType = method === 'POST' ? regularMediaType(request.headers.accept) : undefined;
    let answer: Response | undefined;
    if (mediaType && body && isSingleJsonOperation(request, body)) {
      const operationRequest = yogaRequest();
      const parsed = await graphql.parseRequest(operationRequest, { ...serverContext, waitUntil: ignoreSettled });
      if (parsed.response) answer = parsed.response;
      else if (!Array.isArray(parsed.requestParserResult)) {
        const result = await graphql.getResultForParams({ params: parsed.requestParserResult, request: operationRequest }, serverContext);
        if (result && !isAsyncIterable(result) && !result.errors?.length && !result.extensions?.['http'] && !('stringify' in result)) {
          return send(response, 200, [['Content-Type', `${mediaType}; charset=utf-8`]], Buffer.from(JSON.stringify(result)), options);
        }
        answer = await processRegularResult(result as Parameters<typeof processRegularResult>[0], graphql.fetchAPI, mediaType);
      }
    }
    answer ??= await graphql.fetch(yogaRequest(), serverContext);
    const answerHeaders: [string, string][] = [];
    answer.headers.forEach((value, name) => answerHeaders.push([name, value]));
    return send(response, answer.status, answerHeaders, Buffer.from(await answer.arrayBuffer()), options);
  };
}
