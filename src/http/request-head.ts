import type { IncomingMessage } from 'node:http';
import { LRUCache } from 'lru-cache';
import type { Config } from '../config.js';
import { BadRequestError, HeaderTooLargeError, UriTooLongError, type ApiError } from '../errors.js';

/*
 * The request head's bounds, checked before anything reads it: the target's length, the number
 * and size of header fields, and the Host header (exactly one, well formed).
 */

/** Host values already found valid, so that the check runs once per value, not once per request. */
const KNOWN_HOSTS = 64;

/** The first header value longer than allowed (Authorization is judged by the token check). */
function oversizedHeader(request: IncomingMessage, maxBytes: number): string | undefined {
  for (let i = 0; i < request.rawHeaders.length; i += 2) {
    const value = request.rawHeaders[i + 1]!;
    // Bytes are at most three per UTF-16 unit: most values are judged by their length alone.
    if (value.length * 3 <= maxBytes) continue;
    const name = request.rawHeaders[i]!;
    if (name.toLowerCase() === 'authorization') continue;
    if (Buffer.byteLength(value) > maxBytes) return name;
  }
  return undefined;
}

/**
 * What is wrong with the request's Host headers, if anything (RFC 9112 §3.2): HTTP/1.1 requires
 * exactly one; more than one is refused, since a proxy in front may have read the other.
 */
function hostCountProblem(request: IncomingMessage): string | undefined {
  let count = 0;
  const raw = request.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') count += 1;
  }
  if (count > 1) return 'The request has more than one Host header.';
  if (count === 0 && (request.httpVersionMajor > 1 || request.httpVersionMinor >= 1))
    return 'The request has no Host header.';
  return undefined;
}

/** A Host header as RFC 9110 has it: a host name, an IPv4 address or a bracketed IPv6 one, and an optional port. */
function isValidHost(host: string): boolean {
  if (host.length === 0 || host.length > 255 || /[\s/?#@\\%]/.test(host)) return false;
  try {
    return new URL(`http://${host}`).host !== '';
  } catch {
    return false;
  }
}

/** The check of a request head: the refusal it earns, or undefined when it is within bounds. */
export function headChecker(limits: Config['limits']): (request: IncomingMessage) => ApiError | undefined {
  const knownHosts = new LRUCache<string, true>({ max: KNOWN_HOSTS });
  return (request) => {
    if ((request.url ?? '').length > limits.maxUrlBytes) return new UriTooLongError();
    if (request.rawHeaders.length / 2 > limits.maxHeaderCount)
      return new HeaderTooLargeError('The request has too many header fields.');
    const tooLong = oversizedHeader(request, limits.maxHeaderBytes);
    if (tooLong) return HeaderTooLargeError.forHeader(tooLong);
    const hostProblem = hostCountProblem(request);
    if (hostProblem) return new BadRequestError(hostProblem);
    const host = request.headers.host;
    if (host !== undefined && !knownHosts.has(host)) {
      if (!isValidHost(host)) return new BadRequestError('The Host header is malformed.');
      knownHosts.set(host, true);
    }
    return undefined;
  };
}
