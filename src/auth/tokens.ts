import { SignJWT } from 'jose';
import { secretKey } from '../domain/signing-keys.js';

/** decisions §2: HS256 with the organization's signing secret; `kid` is the organization's public key. */
export const TOKEN_ALGORITHM = 'HS256';

export type MintOptions = {
  /** The organization's signing secret (`credentials.jwtSecret`). */
  secret: string;
  /** The organization's public key (the parent's publicKey). */
  kid: string;
  /** The account's userID. */
  subject: string;
  /** Lifetime in seconds. */
  ttlSeconds: number;
  issuer?: string;
  audience?: string;
  now?: Date;
};

export async function mintAccessToken(options: MintOptions): Promise<string> {
  const issuedAt = Math.floor((options.now ?? new Date()).getTime() / 1000);
  let jwt = new SignJWT({})
    .setProtectedHeader({ alg: TOKEN_ALGORITHM, typ: 'JWT', kid: options.kid })
    .setSubject(options.subject)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + options.ttlSeconds);
  if (options.issuer) jwt = jwt.setIssuer(options.issuer);
  if (options.audience) jwt = jwt.setAudience(options.audience);
  return jwt.sign(secretKey(options.secret));
}

/** Parses a lifetime such as `90s`, `15m`, `1h`, `7d` (a bare number is seconds). */
export function parseTtl(text: string): number {
  const match = /^(\d+)\s*(s|m|h|d)?$/.exec(text.trim());
  if (!match) throw new Error(`invalid lifetime "${text}": use a number with s, m, h or d`);
  const unit = { s: 1, m: 60, h: 3600, d: 86400 }[(match[2] ?? 's') as 's' | 'm' | 'h' | 'd'];
  const seconds = Number(match[1]) * unit;
  if (seconds <= 0) throw new Error('the lifetime must be positive');
  return seconds;
}
