/*
 * An organization's signing key, as the rules of decisions §2 make it: HS256 over its secret's
 * UTF-8 bytes, at least 32 of them. Used by the database's loaders (which keep the imported key
 * with the account it verifies) and by authentication.
 */

import { createSecretKey, type KeyObject } from 'node:crypto';

/** HS256 secrets must be at least 32 bytes (the seed refuses shorter ones; start-up reports them). */
export const MIN_SECRET_BYTES = 32;

/**
 * An organization's token key: its parent's id and the secret, imported once for HMAC checks, and
 * the cache tags of the tokens it verifies (one array shared by all of them).
 */
export type SigningKey = { parentId: string; key: CryptoKey; hmac: KeyObject; tokenTags: readonly string[] };

/** The secret as a WebCrypto HMAC-SHA-256 key (jose would otherwise import it on every check). */
export function verificationKey(secret: Uint8Array<ArrayBuffer>): Promise<CryptoKey> {
  return crypto.subtle.importKey('raw', secret, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
}

/** The same secret as node:crypto's key, for the HMAC check that needs no WebCrypto job (`auth/hs256.ts`). */
export function hmacKey(secret: Uint8Array<ArrayBuffer>): KeyObject {
  return createSecretKey(secret);
}

export function secretKey(secret: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(secret);
}
