import { hash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import type { Credentials, TokenMemo } from './auth/authenticate.js';
import type { RequestRecord } from './context.js';

/** Whether an Accept-Encoding value accepts gzip (named, or `*`, without q=0). */
export function acceptsGzip(acceptEncoding: string | undefined): boolean {
  if (!acceptEncoding) return false;
  return acceptEncoding.split(',').some((item) => {
    const [coding = '', ...parameters] = item.trim().toLowerCase().split(';');
    if (coding.trim() !== 'gzip' && coding.trim() !== '*') return false;
    const q = parameters.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

const gzipAsync = promisify(gzip);

/** A fixed payload (a page, a script), gzipped once off the event loop on first demand. */
export class CompressedPayload {
  #gzip: Promise<Buffer> | undefined;
  constructor(readonly raw: Buffer) {}

  gzip(): Promise<Buffer> {
    return (this.#gzip ??= gzipAsync(this.raw, { level: 6 }));
  }
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's `X-Request-Id` when it is a sane token, or a new one. */
export function requestIdFrom(header: string | null | undefined): string {
  return header && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

/** Each connection's memory of its last token (see `TokenMemo`), gone with the connection. */
const tokenMemos = new WeakMap<Socket, TokenMemo>();

function tokenMemoOf(socket: Socket): TokenMemo {
  let memo = tokenMemos.get(socket);
  if (memo === undefined) tokenMemos.set(socket, (memo = {}));
  return memo;
}

function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/**
 * One request while it is answered, handed to REST and both GraphQL transports: request id, target,
 * credentials, its log record, and the headers every answer carries (`Vary` accumulates). Every
 * answer leaves through `send`.
 */
export class Exchange {
  readonly requestId: string;
  /** The request target as sent, split at the first `?`: not decoded, not normalised. */
  readonly path: string;
  readonly query: string;
  readonly credentials: Credentials;
  readonly record: RequestRecord = {};
  private readonly extra = new Map<string, [string, string]>();
  /** Set while the request counts against the memory budget: called once, when it ends or becomes a stream. */
  private inProgress: (() => void) | undefined;

  constructor(
    readonly request: IncomingMessage,
    readonly response: ServerResponse,
  ) {
    this.requestId = requestIdFrom(firstValue(request.headers['x-request-id']));
    const url = request.url ?? '/';
    const at = url.indexOf('?');
    this.path = at === -1 ? url : url.slice(0, at);
    this.query = at === -1 ? '' : url.slice(at + 1);
    const authorization = firstValue(request.headers.authorization);
    this.credentials = {
      authorization,
      publicKey: firstValue(request.headers['x-public-key']),
      memo: authorization === undefined ? undefined : tokenMemoOf(request.socket),
    };
  }

  /** The request counts as in progress until it ends or becomes a stream; `finished` is then called once. */
  countsAsInProgress(finished: () => void): void {
    this.inProgress = finished;
  }

  leavesProgress(): void {
    const finished = this.inProgress;
    this.inProgress = undefined;
    finished?.();
  }

  header(name: string): string | undefined {
    return firstValue(this.request.headers[name]);
  }

  /** A header for the answer, whatever it turns out to be. `Vary` values add up; others replace. */
  addHeader(name: string, value: string): void {
    const key = name.toLowerCase();
    const existing = this.extra.get(key);
    if (key === 'vary' && existing) {
      this.extra.set(key, [existing[0], mergeVary(existing[1], value)]);
      return;
    }
    this.extra.set(key, [name, value]);
  }

  addHeaders(headers: Iterable<[string, string]> | Record<string, string>): void {
    const entries = Symbol.iterator in headers ? (headers as Iterable<[string, string]>) : Object.entries(headers);
    for (const [name, value] of entries) this.addHeader(name, value);
  }

  /** The whole answer, with the gathered headers and an exact Content-Length; HEAD gets no body. */
  send(
    status: number,
    contentType: string | undefined,
    payload: string | Buffer,
    options: { noStore?: boolean } = {},
  ): void {
    this.write(status, contentType, payload, options.noStore === true, this.carriesSecret(payload));
  }

  /** `send`, knowing whether the payload carries a secret; with `tag`, revalidated by that entity tag. */
  private write(
    status: number,
    contentType: string | undefined,
    payload: string | Buffer,
    noStore: boolean,
    secret: boolean,
    tag?: string,
  ): void {
    // One flat list handed to writeHead: Node frames it directly, without its per-header map
    // (a header set earlier, such as `Connection: close` while draining, still merges).
    const head: string[] = [];
    if (contentType !== undefined) head.push('Content-Type', contentType);
    // A 304 has no body, and its headers update the stored answer's: no length of its own.
    if (status !== 304) head.push('Content-Length', String(Buffer.byteLength(payload)));
    head.push('X-Request-Id', this.requestId);
    if (noStore || secret) head.push('Cache-Control', 'no-store');
    if (tag === undefined) {
      for (const [key, [name, value]] of this.extra) if (!secret || !STORAGE_HEADERS.has(key)) head.push(name, value);
    } else {
      head.push('ETag', tag, 'Cache-Control', REVALIDATE);
      const vary = this.extra.get('vary');
      head.push('Vary', vary === undefined ? VARY_CREDENTIALS : mergeVary(vary[1], VARY_CREDENTIALS));
      for (const [key, [name, value]] of this.extra) if (!REVALIDATION_HEADERS.has(key)) head.push(name, value);
    }
    this.response.writeHead(status, head).end(payload);
  }

  /**
   * An answer carrying the organization's signing secret is never written to any cache: `no-store`,
   * no ETag, never a 304, whichever transport made it.
   */
  private carriesSecret(payload: string | Buffer): boolean {
    return payload.length > 0 && this.record.carriesSecret !== undefined && this.record.carriesSecret(payload);
  }

  /** The head of a chunked answer whose body follows in pieces (an export), sent at once. */
  startStream(status: number, contentType: string, headers: Record<string, string>): void {
    // A stream is bounded by its own share of the memory budget, not by the requests in progress.
    this.leavesProgress();
    const response = this.response;
    response.statusCode = status;
    response.setHeader('Content-Type', contentType);
    response.setHeader('X-Request-Id', this.requestId);
    response.setHeader('Cache-Control', 'no-store');
    this.addHeaders(headers);
    for (const [name, value] of this.extra.values()) response.setHeader(name, value);
    response.flushHeaders();
  }

  /**
   * An answer the caller's browser may keep and must revalidate: a strong `ETag` of the bytes,
   * `Cache-Control: private, no-cache`, 304 when `If-None-Match` names it (`no-store` with a secret).
   */
  sendRevalidated(contentType: string, payload: string | Buffer, tag?: string): void {
    if (this.carriesSecret(payload)) return this.write(200, contentType, payload, true, true);
    tag ??= entityTag(payload);
    if (noneMatch(this.header('if-none-match'), tag)) this.write(200, contentType, payload, false, false, tag);
    else this.write(304, undefined, '', false, false, tag);
  }

  /** A fixed payload, gzipped for a client that accepts it when at least `fromBytes` long. */
  async sendCompressible(
    status: number,
    contentType: string,
    payload: CompressedPayload,
    fromBytes: number,
    options: { noStore?: boolean } = {},
  ): Promise<void> {
    if (payload.raw.length < fromBytes) return this.send(status, contentType, payload.raw, options);
    this.addHeader('Vary', 'Accept-Encoding');
    if (!acceptsGzip(this.header('accept-encoding'))) return this.send(status, contentType, payload.raw, options);
    this.addHeader('Content-Encoding', 'gzip');
    this.send(status, contentType, await payload.gzip(), options);
  }

  sendJson(status: number, body: unknown, options: { noStore?: boolean } = {}): void {
    this.send(status, 'application/json; charset=utf-8', JSON.stringify(body), options);
  }
}

/** Waits for a streamed answer's socket to drain: false when the client read nothing for `stallMs`. */
export async function drained(response: ServerResponse, stallMs: number, signal?: AbortSignal): Promise<boolean> {
  const timeout = AbortSignal.timeout(stallMs);
  try {
    await once(response, 'drain', { signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
    return true;
  } catch (error) {
    if (timeout.aborted && !signal?.aborted) return false;
    throw error;
  }
}

/** Headers that would let a cache keep or revalidate an answer: never sent with a secret. */
const STORAGE_HEADERS = new Set(['cache-control', 'etag', 'last-modified', 'expires']);

/** What a revalidated answer sets: its tag and `Cache-Control` replace any added; `Vary` adds up. */
const REVALIDATION_HEADERS = new Set(['etag', 'cache-control', 'vary']);

/** A revalidated answer differs by the credentials it was answered for. */
const VARY_CREDENTIALS = 'Authorization, X-Public-Key';

function mergeVary(existing: string, added: string): string {
  const values = new Set([...existing.split(','), ...added.split(',')].map((v) => v.trim()).filter(Boolean));
  return [...values].join(', ');
}

/** What cacheable answers carry: browsers keep them and revalidate every time; shared caches keep nothing. */
export const REVALIDATE = 'private, no-cache';

/** A strong entity tag: the first 128 bits of the bytes' SHA-256, base64url. */
export function entityTag(payload: string | Buffer): string {
  return `"${hash('sha256', payload, 'base64url').slice(0, 22)}"`;
}

/** Entity tags in one If-None-Match header at most: a longer list is not read (and never matches). */
const MAX_TAGS = 64;

/** Whether `If-None-Match` lets the answer through (RFC 9110 §13.1.2, weak comparison). */
export function noneMatch(header: string | undefined, tag: string): boolean {
  if (header === undefined) return true;
  if (header.trim() === '*') return false;
  const listed = header.split(',', MAX_TAGS + 1);
  if (listed.length > MAX_TAGS) return true;
  return !listed.some((entry) => {
    const trimmed = entry.trim();
    return (trimmed.startsWith('W/') ? trimmed.slice(2) : trimmed) === tag;
  });
}
