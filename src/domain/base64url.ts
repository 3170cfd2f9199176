const BASE64URL = /^[A-Za-z0-9_-]+$/;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/**
 * The spelling an encoder writes for the bytes a lenient decoder reads from `segment` (padding
 * dropped, unused trailing bits zeroed): every spelling of the same bytes has the same one.
 */
export function canonicalBase64url(segment: string): string {
  return Buffer.from(segment, 'base64url').toString('base64url');
}

/**
 * Whether a segment is base64url as an encoder writes it: no padding, no characters outside the
 * alphabet, and zero bits after the last byte. Lenient decoders (Node's and jose's) accept other
 * spellings of the same bytes; tokens in any other spelling are treated as altered.
 */
export function isCanonicalBase64url(segment: string): boolean {
  if (!BASE64URL.test(segment)) return false;
  // Without decoding: a last group of 2 or 3 characters carries 4 or 2 bits past its last byte.
  const tail = segment.length % 4;
  if (tail === 0) return true;
  if (tail === 1) return false;
  return (ALPHABET.indexOf(segment[segment.length - 1]!) & (tail === 2 ? 0x0f : 0x03)) === 0;
}
