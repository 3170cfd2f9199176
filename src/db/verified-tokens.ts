import { hash } from 'node:crypto';
import { FIELD, numberOf, numberText } from './compact-text.js';
import type { CacheReader, CompactForm } from './entity-cache.js';

/** The last token a connection sent and its cache key, so that the key's SHA-256 is made once a connection. */
export type TokenMemo = { token?: string; key?: string };

/** A token's key: SHA-256 of its exact text cut to 132 bits, a size that does not depend on what callers send. */
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

/** A verified token as text for the record ring, about 60 bytes; the subject last, as the rest of the text. */
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

/** What `verify` establishes of `token`, remembered until the key it was checked with changes (a refusal throws). */
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
