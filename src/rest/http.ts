import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ApiError } from '../errors.js';

/** What the answer to a request turned out to be, beyond its status: for its log line and metrics. */
export type Observed = {
  /** The error code answered (REST envelope, GraphQL refusal, or the first error of a GraphQL result). */
  code?: string;
  /** GraphQL: the root fields the operation selected (see `graphql/observe.ts`). */
  operation?: string;
  /** Who the request was authenticated as, once it was; unset: anonymous. */
  caller?: 'parent' | 'child' | 'publicKey';
  /** The organization (its parent's userID) the caller belongs to. */
  organizationId?: string;
};

/** What every REST answer carries besides its body. */
export type ResponseOptions = {
  requestId: string;
  /** Filled in as the answer is made. */
  observed?: Observed;
  /** Authenticated answers must not be stored by caches. */
  noStore?: boolean;
  headers?: Record<string, string>;
};

export function sendJson(response: ServerResponse, status: number, body: unknown, options: ResponseOptions): void {
  send(response, status, 'application/json; charset=utf-8', JSON.stringify(body), options);
}

/** An answer of any media type, with the headers every answer carries. */
export function send(response: ServerResponse, status: number, contentType: string, payload: string | Buffer, options: ResponseOptions): void {
  response.statusCode = status;
  response.setHeader('Content-Type', contentType);
  response.setHeader('Content-Length', Buffer.byteLength(payload));
  response.setHeader('X-Request-Id', options.requestId);
  if (options.noStore) response.setHeader('Cache-Control', 'no-store');
  for (const [name, value] of Object.entries(options.headers ?? {})) response.setHeader(name, value);
  // Node sends no body for HEAD by itself; the headers stay those of GET.
  response.end(payload);
}

/** decisions §6: `{ success: false, error: { code, message } }` everywhere. */
export function errorEnvelope(error: ApiError): { success: false; error: { code: string; message: string } } {
  return { success: false, error: { code: error.code, message: error.message } };
}

export function sendError(response: ServerResponse, error: ApiError, options: ResponseOptions): void {
  if (options.observed) options.observed.code = error.code;
  sendJson(response, error.status, errorEnvelope(error), options);
}

/** Stands for a value that is not valid percent-encoded UTF-8: every parameter rule refuses it. */
export const UNDECODABLE = '\u0000';

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return undefined;
  }
}

/**
 * Query parameters by name (the raw query string, without `?`); a name given more than once keeps
 * every value so it can be refused. Unlike URLSearchParams, invalid UTF-8 is not silently
 * replaced: the value becomes UNDECODABLE. Work is linear in the input, and only the first
 * `maxParameters` parameters are read: the rest are ignored.
 */
export function queryParameters(query: string, maxParameters: number): Map<string, string[]> {
  const parameters = new Map<string, string[]>();
  let read = 0;
  for (let start = 0; start < query.length && read < maxParameters; ) {
    let end = query.indexOf('&', start);
    if (end === -1) end = query.length;
    const pair = query.slice(start, end);
    start = end + 1;
    if (pair === '') continue;
    read += 1;
    const at = pair.indexOf('=');
    const name = decode(at === -1 ? pair : pair.slice(0, at));
    if (name === undefined) continue;
    const value = decode(at === -1 ? '' : pair.slice(at + 1)) ?? UNDECODABLE;
    const values = parameters.get(name);
    if (values) values.push(value);
    else parameters.set(name, [value]);
  }
  return parameters;
}

export function header(request: IncomingMessage, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Milliseconds since the epoch, or null (decisions §1). */
export function millis(date: Date | null): number | null {
  return date === null ? null : date.getTime();
}
