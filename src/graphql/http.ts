import { GraphQLError, type ExecutionResult } from 'graphql';
import { LRUCache } from 'lru-cache';
import type { SharedAnswer } from '../context.js';
import type { ApiError } from '../errors.js';
import type { HttpHint } from './pipeline.js';
import { entityTag, type Exchange } from '../exchange.js';

/*
 * GraphQL over HTTP's framing of a single result as Yoga frames it: media type from Accept, status
 * from the errors' hints, body without them. The parity test compares both transports byte for byte.
 */

export type RegularMediaType = 'application/json' | 'application/graphql-response+json';
const REGULAR: readonly RegularMediaType[] = ['application/graphql-response+json', 'application/json'];

function matches(asked: string, offered: string): boolean {
  const [askedType, askedSubtype] = asked.split('/');
  const [type, subtype] = offered.split('/');
  return (type === '*' || type === askedType) && (subtype === '*' || subtype === askedSubtype);
}

/**
 * The JSON media type for a single result, or null when Accept names neither (the full server's to
 * answer). Read as Yoga reads it: no quality values, UTF-8 only, the first match wins.
 */
export function regularMediaType(accept: string | undefined): RegularMediaType | null {
  if (accept === undefined) return WITHOUT_ACCEPT;
  let chosen = negotiated.get(accept);
  if (chosen === undefined) {
    chosen = negotiate(accept) ?? 'none';
    negotiated.set(accept, chosen);
  }
  return chosen === 'none' ? null : chosen;
}

/** Accept lists already negotiated: clients send a handful of them, again and again. Bounded in bytes. */
const negotiated = new LRUCache<string, RegularMediaType | 'none'>({
  max: 64,
  maxSize: 64 * 1024,
  maxEntrySize: 1024,
  sizeCalculation: (_value, key) => key.length + 16,
});

function negotiate(accept: string | undefined): RegularMediaType | null {
  const entries = (accept || '*/*').replace(/\s/g, '').toLowerCase().split(',');
  for (const entry of entries) {
    const [asked, ...parameters] = entry.split(';');
    if (asked === undefined) continue;
    const charset = parameters.find((parameter) => parameter.includes('charset=')) ?? 'charset=utf-8';
    if (charset !== 'charset=utf-8') continue;
    let chosen: RegularMediaType | undefined;
    for (const offered of REGULAR) if (matches(offered, asked)) chosen = offered;
    if (chosen) return chosen;
  }
  return null;
}

/** A request without Accept is answered as one that accepts anything. */
const WITHOUT_ACCEPT = negotiate(undefined);

function hintOf(error: unknown): HttpHint | undefined {
  return (error as { extensions?: { http?: HttpHint } }).extensions?.http;
}

function isOriginalGraphQLError(error: unknown): boolean {
  if (!(error instanceof GraphQLError)) return false;
  return error.originalError == null || isOriginalGraphQLError(error.originalError);
}

/** A result's status (the highest hint; 500 for an unexpected error with no data) and its errors' headers. */
function statusOf(result: ExecutionResult, mediaType: RegularMediaType, headers: Record<string, string>): number {
  const errors = result.errors ?? [];
  const lenient =
    mediaType === 'application/json' &&
    errors.some((error) => error instanceof GraphQLError) &&
    errors.some((error) => {
      const original = (error.extensions as Record<string, unknown> | undefined)?.['originalError'];
      return !original || original instanceof GraphQLError;
    });
  let status: number | undefined;
  let unexpected = false;
  const resultHint = hintOf(result);
  if (resultHint?.headers) Object.assign(headers, resultHint.headers);
  if (resultHint?.status) status = resultHint.status;
  if (errors.length === 0) return status || 200;
  for (const error of errors) {
    const hint = hintOf(error);
    if (hint) {
      if (hint.headers) Object.assign(headers, hint.headers);
      if (lenient && hint.spec) continue;
      if (hint.status && (!status || hint.status > status)) status = hint.status;
    } else if (
      !isOriginalGraphQLError(error) ||
      (error.extensions as Record<string, unknown> | undefined)?.['unexpected']
    ) {
      unexpected = true;
    }
  }
  return status ?? (unexpected && !('data' in result) ? 500 : 200);
}

/** An error as sent: its JSON form without the hints meant for the server. */
function sentError(error: GraphQLError): unknown {
  if (!(error instanceof GraphQLError)) return error;
  const json = error.toJSON() as { extensions?: Record<string, unknown> };
  if (json.extensions) {
    const { http: _http, unexpected: _unexpected, ...extensions } = json.extensions;
    if (Object.keys(extensions).length) json.extensions = extensions;
    else delete json.extensions;
  }
  return json;
}

/** The body as sent, without the hints, by the result's own serialiser when it has one (a compiled query's). */
export function serialiseResult(result: ExecutionResult): string {
  const stringify = (result as { stringify?: (value: unknown) => string }).stringify ?? JSON.stringify;
  const extensions = result.extensions as Record<string, unknown> | undefined;
  if (!result.errors?.length && !extensions?.['http']) return stringify(result);
  const sent: Record<string, unknown> = { ...result };
  if (result.errors) sent['errors'] = result.errors.map(sentError);
  if (extensions) {
    const { http: _http, ...rest } = extensions;
    sent['extensions'] = Object.keys(rest).length ? rest : undefined;
  }
  return stringify(sent);
}

/** Whether a GraphQL answer may be kept and revalidated: a successful GET of a stored operation by id. */
export function revalidatable(exchange: Exchange, status: number, hasErrors: () => boolean): boolean {
  return status === 200 && exchange.record.persisted === true && exchange.request.method === 'GET' && !hasErrors();
}

export function sendResult(exchange: Exchange, result: ExecutionResult, mediaType: RegularMediaType): void {
  const headers: Record<string, string> = {};
  const status = statusOf(result, mediaType, headers);
  exchange.record.code ??= (result.errors?.[0]?.extensions as Record<string, unknown> | undefined)?.['code'] as
    string | undefined;
  exchange.addHeaders(headers);
  const contentType = `${mediaType}; charset=utf-8`;
  if (revalidatable(exchange, status, () => Boolean(result.errors?.length)))
    exchange.sendRevalidated(contentType, serialiseResult(result));
  else exchange.send(status, contentType, serialiseResult(result), { noStore: true });
}

/** A shared answer (no errors, so 200), as `sendResult` would send the result it was made from. */
export function sendAnswer(exchange: Exchange, answer: SharedAnswer, mediaType: RegularMediaType): void {
  const contentType = `${mediaType}; charset=utf-8`;
  if (revalidatable(exchange, 200, () => false))
    exchange.sendRevalidated(contentType, answer.body, (answer.etag ??= entityTag(answer.body)));
  else exchange.send(200, contentType, answer.body, { noStore: true });
}

/** A refusal made before the pipeline, in GraphQL's error shape and the accepted media type, with its status. */
export function sendGraphQLError(exchange: Exchange, error: ApiError): void {
  exchange.record.code = error.code;
  const { retryAfterSeconds } = error;
  if (retryAfterSeconds !== undefined) exchange.addHeader('Retry-After', String(retryAfterSeconds));
  const mediaType = regularMediaType(exchange.header('accept')) ?? 'application/json';
  const extensions = retryAfterSeconds === undefined ? { code: error.code } : { code: error.code, retryAfterSeconds };
  const body = JSON.stringify({ errors: [{ message: error.message, extensions }] });
  exchange.send(error.status, `${mediaType}; charset=utf-8`, body, { noStore: true });
}
