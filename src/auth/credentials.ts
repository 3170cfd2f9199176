import { createHash } from 'node:crypto';
import { canonicalBase64url, isCanonicalBase64url } from '../domain/base64url.js';
import { UnauthorizedError } from '../errors.js';

/*
 * The shape of what callers send, checked before any other work: the Authorization header's
 * bearer token, and a key that names one credential however it is spelled (for rate limiting).
 */

const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i;

/** The token of `Authorization: Bearer <token>`; anything else, or a token over `maxBytes`, is refused. */
export function bearerToken(authorization: string, maxBytes: number): string {
  // Bounded before the pattern runs: the header may be far longer than any token.
  if (authorization.length > maxBytes + 32) throw new UnauthorizedError('The access token is invalid.');
  const match = BEARER.exec(authorization);
  if (!match) throw new UnauthorizedError('The Authorization header must be "Bearer <token>".');
  const token = match[1]!;
  if (token.length > maxBytes) throw new UnauthorizedError('The access token is invalid.');
  return token;
}

/** A compact JWS whose three segments are canonical base64url (decisions §2: an altered token is invalid). */
export function isCanonicalJws(token: string): boolean {
  const segments = token.split('.');
  return segments.length === 3 && segments.every(isCanonicalBase64url);
}

/**
 * A digest that names the credential a request carries, the same for every spelling of it: the
 * scheme's case and the spaces around a bearer token do not count, nor do padding or unused
 * trailing bits in a JWT's segments (each segment is keyed by the bytes it decodes to). Undefined
 * when the request carries no credential.
 */
export function credentialKey(authorization: string | undefined, publicKey: string | undefined): string | undefined {
  let material: string | undefined;
  if (authorization !== undefined && authorization.trim() !== '') {
    const match = BEARER.exec(authorization.trim());
    const token = match?.[1];
    if (token === undefined) material = `header:${authorization.trim().replace(/\s+/g, ' ').toLowerCase()}`;
    else {
      const segments = token.split('.');
      material =
        segments.length === 3 && segments.every((segment) => /^[A-Za-z0-9_=-]*$/.test(segment))
          ? `jws:${segments.map(canonicalBase64url).join('.')}`
          : `bearer:${token}`;
    }
  } else if (publicKey !== undefined && publicKey.trim() !== '') {
    material = `key:${publicKey.trim()}`;
  }
  return material === undefined ? undefined : createHash('sha256').update(material).digest('base64url');
}
