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
 * jose's `jwtVerify` for HS256, with the signature checked by node:crypto for the one plain token
 * shape the API issues: WebCrypto's HMAC costs about 30 µs a token, node:crypto's about 5. Claims are
 * still validated by jose, and `test/token-differential.test.ts` checks the verdicts are jose's.
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

/** `jwtVerify(token, key.key, options)`; `header`: of a token the caller already found a canonical compact JWS. */
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
