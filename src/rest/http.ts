import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ApiError } from '../errors.js';

/** What every REST answer carries besides its body. */
export type ResponseOptions = {
  requestId: string;
  /** Authenticated answers must not be stored by caches. */
  noStore?: boolean;
  headers?: Record<string, string>;
};

export function sendJson(response: ServerResponse, status: number, body: unknown, options: ResponseOptions): void {
  const payload = JSON.stringify(body);
  response.statusCode = status;
  response.setHeader('Content-Type', 'application/json; charset=utf-8');
  response.setHeader('Content-Length', Buffer.byteLength(payload));
  response.setHeader('X-Request-Id', options.requestId);
  if (options.noStore) response.setHeader('Cache-Control', 'no-store');
  for (const [name, value] of Object.entries(options.headers ?? {})) response.setHeader(name, value);
  // Node sends no body for HEAD by itself; the headers stay those of GET.
  response.end(payload);
}

/** decisions §6: `{ success: false, error: { code, message } }` everywhere. */
export function sendError(response: ServerResponse, error: ApiError, options: ResponseOptions): void {
  sendJson(response, error.status, { success: false, error: { code: error.code, message: error.message } }, options);
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
 * Query parameters by name; a name given more than once keeps every value so it can be refused.
 * Unlike URLSearchParams, invalid UTF-8 is not silently replaced: the value becomes UNDECODABLE.
 */
export function queryParameters(url: URL): Map<string, string[]> {
  const parameters = new Map<string, string[]>();
  for (const pair of url.search.slice(1).split('&')) {
    if (pair === '') continue;
    const at = pair.indexOf('=');
    const name = decode(at === -1 ? pair : pair.slice(0, at));
    if (name === undefined) continue;
    const value = decode(at === -1 ? '' : pair.slice(at + 1)) ?? UNDECODABLE;
    parameters.set(name, [...(parameters.get(name) ?? []), value]);
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
