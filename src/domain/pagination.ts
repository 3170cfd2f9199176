import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidPaginationTokenError } from '../errors.js';
import { isCanonicalBase64url } from './base64url.js';

/*
 * The child list's page token (decisions §4): the keyset position (registration time and id of
 * the last row sent), bound to the list it was issued for — the parent and the filters (search and
 * date bounds) — and authenticated with HMAC-SHA256 under a server-side key. It is opaque to
 * clients; any change to it, or its use with other filters, is refused.
 */

export type Position = { createdAt: Date; id: string };

/**
 * The list a token continues: the parent and the filters, as one string that differs whenever
 * the filters select different rows (the service writes it from the normalised filters).
 */
export type PageScope = string;

const VERSION = 'v2';
const MAX_TOKEN_LENGTH = 512;

function mac(key: string | Uint8Array, scope: PageScope, body: string): Buffer {
  return createHmac('sha256', key).update(`${VERSION}\n${scope}\n${body}`).digest();
}

export function encodePageToken(position: Position, scope: PageScope, key: string | Uint8Array): string {
  const body = Buffer.from(JSON.stringify([position.createdAt.getTime(), position.id])).toString('base64url');
  return `${body}.${mac(key, scope, body).toString('base64url')}`;
}

export function decodePageToken(token: string, scope: PageScope, key: string | Uint8Array): Position {
  if (token.length === 0 || token.length > MAX_TOKEN_LENGTH) throw new InvalidPaginationTokenError();
  const [body, signature, extra] = token.split('.');
  if (!body || !signature || extra !== undefined) throw new InvalidPaginationTokenError();
  // Only the spelling the server wrote: padding or changed unused bits are an altered token.
  if (!isCanonicalBase64url(body) || !isCanonicalBase64url(signature)) throw new InvalidPaginationTokenError();
  const expected = mac(key, scope, body);
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new InvalidPaginationTokenError();
  }
  try {
    const decoded: unknown = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
    if (
      Array.isArray(decoded) &&
      decoded.length === 2 &&
      Number.isSafeInteger(decoded[0]) &&
      typeof decoded[1] === 'string'
    ) {
      return { createdAt: new Date(decoded[0] as number), id: decoded[1] };
    }
  } catch {
    // falls through to the refusal below
  }
  throw new InvalidPaginationTokenError();
}
