import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Credentials } from '../auth/authenticate.js';
import type { RequestRecord } from '../context.js';

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's `X-Request-Id` when it is a sane token, or a new one. */
export function requestIdFrom(header: string | null | undefined): string {
  return header && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/**
 * One request while it is answered, handed to REST and to both GraphQL doors: the request id, the
 * target as sent, the credentials read once, the record its log line and metrics are made from,
 * and the headers every answer carries (CORS, rate limits), merged as they are added: `Vary`
 * accumulates, nothing is overwritten by a later layer by accident. Every answer leaves through
 * `send`, so every answer has the same framing.
 */
export class Exchange {
  readonly requestId: string;
  /** The request target as sent, split at the first `?`: not decoded, not normalised. */
  readonly path: string;
  readonly query: string;
  readonly credentials: Credentials;
  readonly record: RequestRecord = {};
  private readonly extra = new Map<string, [string, string]>();

  constructor(
    readonly request: IncomingMessage,
    readonly response: ServerResponse,
  ) {
    this.requestId = requestIdFrom(firstValue(request.headers['x-request-id']));
    const url = request.url ?? '/';
    const at = url.indexOf('?');
    this.path = at === -1 ? url : url.slice(0, at);
    this.query = at === -1 ? '' : url.slice(at + 1);
    this.credentials = { authorization: firstValue(request.headers.authorization), publicKey: firstValue(request.headers['x-public-key']) };
  }

  /** The value of a request header (the first, when repeated). */
  header(name: string): string | undefined {
    return firstValue(this.request.headers[name]);
  }

  /** A header for the answer, whatever it turns out to be. `Vary` values add up; others replace. */
  addHeader(name: string, value: string): void {
    const key = name.toLowerCase();
    const existing = this.extra.get(key);
    if (key === 'vary' && existing) {
      const values = new Set([...existing[1].split(','), ...value.split(',')].map((v) => v.trim()).filter(Boolean));
      this.extra.set(key, [existing[0], [...values].join(', ')]);
      return;
    }
    this.extra.set(key, [name, value]);
  }

  addHeaders(headers: Iterable<[string, string]> | Record<string, string>): void {
    const entries = Symbol.iterator in headers ? (headers as Iterable<[string, string]>) : Object.entries(headers);
    for (const [name, value] of entries) this.addHeader(name, value);
  }

  /**
   * The answer, whole: status, media type, the headers gathered on the exchange, the request id,
   * `Cache-Control: no-store` where asked (authenticated answers), and an exact Content-Length.
   * HEAD gets the headers of GET and no body (Node leaves it out).
   */
  send(status: number, contentType: string | undefined, payload: string | Buffer, options: { noStore?: boolean } = {}): void {
    const response = this.response;
    response.statusCode = status;
    if (contentType !== undefined) response.setHeader('Content-Type', contentType);
    response.setHeader('Content-Length', Buffer.byteLength(payload));
    response.setHeader('X-Request-Id', this.requestId);
    if (options.noStore) response.setHeader('Cache-Control', 'no-store');
    for (const [name, value] of this.extra.values()) response.setHeader(name, value);
    response.end(payload);
  }

  sendJson(status: number, body: unknown, options: { noStore?: boolean } = {}): void {
    this.send(status, 'application/json; charset=utf-8', JSON.stringify(body), options);
  }
}
