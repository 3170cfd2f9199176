import { createHmac, timingSafeEqual, type KeyObject } from 'node:crypto';
import {
  decodeProtectedHeader,
  errors as joseErrors,
  jwtVerify,
  UnsecuredJWT,
  type JWTPayload,
  type JWTVerifyOptions,
} from 'jose';
import { isCanonicalJws } from './credentials.js';

/*
 * jose's `jwtVerify` for HS256, with the signature checked by node:crypto when the token is of
 * the one plain shape the API issues. jose checks HMACs through WebCrypto, whose asynchronous
 * job costs about 30 µs of CPU a token on Node 20 (node:crypto's HMAC and `timingSafeEqual`:
 * about 5); a token a server has not seen yet pays it on every request of a large population.
 *
 * The verdict is jose's in every case, which `test/token-differential.test.ts` checks token by
 * token against `jwtVerify` (the hostile-token suite and a generated corpus):
 * - the shortcut applies only to a token whose three segments are canonical base64url and whose
 *   header names nothing but `alg` (HS256), `kid` and `typ`: no `crit`, no `b64`, no key material.
 *   Anything else goes to `jwtVerify` whole;
 * - the claims are still decoded and validated by jose (`UnsecuredJWT.decode` runs the same
 *   claims-set validation as `jwtVerify`, with the same options), after the signature, as
 *   `jwtVerify` orders them.
 */

/** An HS256 key both ways: WebCrypto's for jose, node:crypto's for the shortcut. */
export type Hs256Key = { key: CryptoKey; hmac: KeyObject };

/** The header segment of an unsecured JWT: only the claims are handed to jose this way. */
const UNSECURED_HEADER = Buffer.from(JSON.stringify({ alg: 'none' })).toString('base64url');

/** What the API's tokens' headers hold; any other member sends the token to `jwtVerify`. */
const PLAIN_MEMBERS = new Set(['alg', 'kid', 'typ']);

function plainHs256(header: Record<string, unknown>): boolean {
  if (header.alg !== 'HS256') return false;
  for (const member in header) if (!PLAIN_MEMBERS.has(member)) return false;
  return true;
}

/**
 * `jwtVerify(token, key.key, options)`: the same payload, or the same error class. `header`: the
 * protected header of a token the caller has already found to be a canonical compact JWS (both
 * are then not checked again); without it, this function checks both itself.
 */
export async function verifyHs256(
  token: string,
  key: Hs256Key,
  options: JWTVerifyOptions,
  header?: Record<string, unknown>,
): Promise<JWTPayload> {
  // The header's `typ`, which jose may be asked to check, is not handed on with the claims.
  const shortcut =
    (options.algorithms?.includes('HS256') ?? true) &&
    options.typ === undefined &&
    (header !== undefined || isCanonicalJws(token));
  if (!shortcut) return (await jwtVerify(token, key.key, options)).payload;
  let protectedHeader: Record<string, unknown>;
  try {
    protectedHeader = header ?? decodeProtectedHeader(token);
  } catch {
    return (await jwtVerify(token, key.key, options)).payload;
  }
  if (!plainHs256(protectedHeader)) return (await jwtVerify(token, key.key, options)).payload;
  const signed = token.lastIndexOf('.');
  const expected = createHmac('sha256', key.hmac).update(token.slice(0, signed)).digest();
  // Canonical base64url: the segment decodes to exactly the bytes it spells.
  const signature = Buffer.from(token.slice(signed + 1), 'base64url');
  if (signature.length !== expected.length || !timingSafeEqual(signature, expected))
    throw new joseErrors.JWSSignatureVerificationFailed();
  const payload = token.slice(token.indexOf('.') + 1, signed);
  const { algorithms: _algorithms, crit: _crit, ...claims } = options;
  return UnsecuredJWT.decode(`${UNSECURED_HEADER}.${payload}.`, claims).payload;
}
