import { hash } from 'node:crypto';
import { FIELD, numberOf, numberText } from './compact-text.js';
import type { CacheReader, CompactForm } from './entity-cache.js';

/**
 * The last token a connection sent and its cache key: a client sends one token on a connection,
 * request after request, and the key's SHA-256 (1.5 to 2.5 µs a request in profiles) is made once.
 * One token a connection, going with it; the key depends on the token's text alone.
 */
export type TokenMemo = { token?: string; key?: string };

/**
 * Tokens are remembered under the digest of their exact text: the key's size does not depend on
 * what callers send. SHA-256 cut to its first 132 bits (22 base64url characters, 21 bytes less a
 * held token): finding another text with a remembered token's key still takes about 2^132 tries
 * (2^112 against a million held).
 */
function tokenKey(token: string, memo: TokenMemo | undefined): string {
  if (memo !== undefined && memo.token === token) return memo.key!;
  const key = `token:${hash('sha256', token, 'base64url').slice(0, 22)}`;
  if (memo !== undefined) {
    memo.token = token;
    memo.key = key;
  }
  return key;
}

/** What a verified token established: who, for which organization, and its time claims. */
export type VerifiedToken = { subject: string; parentId: string; exp: number; iat: number; nbf: number | undefined };

/**
 * A verified token as text for the record ring: about 60 bytes rather than an object of five. The
 * subject comes last and is read as the rest of the text, whatever it holds: a signed `sub` may
 * spell the separator, the other values (the key's parent, numbers) cannot.
 */
export const compactToken: CompactForm<VerifiedToken> = {
  encode: (token) =>
    `${token.parentId}${FIELD}${numberText(token.exp)}${FIELD}${numberText(token.iat)}${FIELD}${numberText(token.nbf)}${FIELD}${token.subject}`,
  decode: (text) => {
    const exp = text.indexOf(FIELD);
    const iat = text.indexOf(FIELD, exp + 1);
    const nbf = text.indexOf(FIELD, iat + 1);
    const subject = text.indexOf(FIELD, nbf + 1);
    return {
      subject: text.slice(subject + 1),
      parentId: text.slice(0, exp),
      exp: numberOf(text.slice(exp + 1, iat))!,
      iat: numberOf(text.slice(iat + 1, nbf))!,
      nbf: numberOf(text.slice(nbf + 1, subject)) ?? undefined,
    };
  },
};

/**
 * What `verify` establishes of `token`, verified once and then remembered until the key it was
 * checked with changes: `verify` gives the tags of that key (`SigningKey.tokenTags`: a rotated
 * secret, a parent whose key or status changed; not sign-ins). Only a token that passed every
 * check has an entry: a refusal throws.
 */
export function verifiedOnce(
  cache: CacheReader,
  token: string,
  memo: TokenMemo | undefined,
  verify: () => Promise<{ verified: VerifiedToken; tags: readonly string[] }>,
): Promise<VerifiedToken> {
  let tags: readonly string[] = [];
  return cache.through(tokenKey(token, memo), {
    tags: () => tags,
    compact: compactToken,
    read: async () => {
      const checked = await verify();
      tags = checked.tags;
      return checked.verified;
    },
  });
}
