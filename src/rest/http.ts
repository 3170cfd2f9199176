import type { RequestContext } from '../context.js';
import { ApiError, MethodNotAllowedError, toApiError } from '../errors.js';
import { entityTag, type Exchange } from '../exchange.js';
import type { Logger } from '../logger.js';

/** decisions §6: `{ success: false, error: { code, message } }` everywhere. */
export function errorEnvelope(error: ApiError): { success: false; error: { code: string; message: string } } {
  return { success: false, error: { code: error.code, message: error.message } };
}

/** A refusal in the REST envelope, recorded for the log line and metrics. */
export function sendRestError(exchange: Exchange, error: ApiError, options: { noStore?: boolean } = {}): void {
  exchange.record.code = error.code;
  if (error.status === 401) exchange.addHeader('WWW-Authenticate', 'Bearer');
  if (error.retryAfterSeconds !== undefined) exchange.addHeader('Retry-After', String(error.retryAfterSeconds));
  exchange.sendJson(error.status, errorEnvelope(error), options);
}

/** What the read-only paths take (decisions §6). */
export const READ_ONLY = 'GET, HEAD';

/** Anything but GET and HEAD is 405 `METHOD_NOT_ALLOWED` with `Allow` (decisions §6); returns whether it was. */
export function refusedMethod(exchange: Exchange): boolean {
  const method = exchange.request.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD') return false;
  exchange.addHeader('Allow', READ_ONLY);
  sendRestError(exchange, new MethodNotAllowedError(method));
  return true;
}

/** One documented path: its answer's body from the request context and the query parameters. */
export type RestOperation = (context: RequestContext, parameters: Map<string, string[]>) => Promise<unknown>;

/** Answers one documented path: 200 revalidated by its ETag, or its refusal in the envelope, `no-store`. */
export async function answerRest(
  exchange: Exchange,
  operation: RestOperation,
  context: RequestContext,
  options: {
    maxQueryParameters: number;
    logger: Logger;
    /**
     * The path's answer shows the caller's organization alone: held for its readers (`RequestContext.sharedAnswer`).
     */
    sharedByOrganization?: boolean;
  },
): Promise<void> {
  const { logger, sharedByOrganization } = options;
  const body = async () =>
    Buffer.from(JSON.stringify(await operation(context, queryParameters(exchange.query, options.maxQueryParameters))));
  try {
    if (sharedByOrganization) {
      const answer = (await context.sharedAnswer(`${exchange.path}?${exchange.query}`, body))!;
      exchange.sendRevalidated(JSON_TYPE, answer.body, (answer.etag ??= entityTag(answer.body)));
    } else exchange.sendRevalidated(JSON_TYPE, await body());
  } catch (error) {
    const apiError = toApiError(error);
    if (!(error instanceof ApiError)) {
      logger.error('unexpected error in a REST route', {
        error,
        path: exchange.path,
        requestId: exchange.requestId,
        code: apiError.code,
      });
    }
    sendRestError(exchange, apiError, { noStore: true });
  }
}

const JSON_TYPE = 'application/json; charset=utf-8';

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
 * Query parameters by name, every value kept so repeats can be refused; invalid UTF-8 becomes
 * UNDECODABLE. Linear, and only the first `maxParameters` are read.
 */
export function queryParameters(query: string, maxParameters: number): Map<string, string[]> {
  const parameters = new Map<string, string[]>();
  let read = 0;
  for (let start = 0; start < query.length && read < maxParameters;) {
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

/** Milliseconds since the epoch, or null (decisions §1). */
export function millis(date: Date | null): number | null {
  return date === null ? null : date.getTime();
}
