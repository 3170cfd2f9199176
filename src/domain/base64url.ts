const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * Whether a segment is base64url as an encoder writes it: no padding, no characters outside the
 * alphabet, and zero bits after the last byte. Lenient decoders (Node's and jose's) accept other
 * spellings of the same bytes; tokens in any other spelling are treated as altered.
 */
export function isCanonicalBase64url(segment: string): boolean {
  return BASE64URL.test(segment) && Buffer.from(segment, 'base64url').toString('base64url') === segment;
}
