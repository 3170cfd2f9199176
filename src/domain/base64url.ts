const BASE64URL = /^[A-Za-z0-9_-]+$/;

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
  return BASE64URL.test(segment) && canonicalBase64url(segment) === segment;
}
