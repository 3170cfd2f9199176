import { createHmac } from 'node:crypto';
import { SignJWT, base64url } from 'jose';
import { secretKey } from '../../src/domain/signing-keys.js';

/*
 * The hostile-token suite: tokens an attacker sends, each named. The adversarial test sends them
 * to every path (each must get 401, or 404 for a signed token of no account); the differential
 * test hands them to the token check's shortcut and to jose's `jwtVerify` (same verdict).
 */

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

export type HostileTokenParts = {
  /** The organization's signing secret. */
  secret: string;
  /** Its public key (the tokens' `kid`). */
  kid: string;
  /** An account of the organization (the good token's subject). */
  subject: string;
  /** Another account, for a payload signed for someone else. */
  otherSubject: string;
  /** A correctly signed, current token for `subject`. */
  good: string;
  /** The time the tokens are made at, in seconds. */
  now: number;
};

export async function hostileTokens({
  secret,
  kid,
  subject,
  otherSubject,
  good,
  now,
}: HostileTokenParts): Promise<[string, string][]> {
  const b64 = (value: unknown) => base64url.encode(typeof value === 'string' ? value : JSON.stringify(value));
  const [h, p, s] = good.split('.') as [string, string, string];
  const sign = (claims: Record<string, unknown>, header: Record<string, unknown> = {}) =>
    new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid, ...header } as { alg: string }).sign(secretKey(secret));
  return [
    ['two segments', `${h}.${p}`],
    ['four segments', `${good}.extra`],
    ['one segment', h],
    ['empty segments', '..'],
    ['bad base64url header', `%%%.${p}.${s}`],
    ['non-JSON header', `${b64('not json')}.${p}.${s}`],
    ['JSON array header', `${b64([1, 2])}.${p}.${s}`],
    ['non-JSON payload', `${h}.${b64('nope')}.${s}`],
    ['10 KB token', `${h}.${'A'.repeat(10_000)}.${s}`],
    ['padded signature', `${h}.${p}.${s}=`],
    ['signature with changed unused bits', `${h}.${p}.${s.slice(0, -1)}${B64URL[B64URL.indexOf(s.at(-1)!) ^ 1]}`],
    ['padded payload', `${h}.${p}${'='.repeat((4 - (p.length % 4)) % 4 || 4)}.${s}`],
    ['exp 1e308', await sign({ sub: subject, iat: now, exp: 1e308 })],
    ['lifetime of a year', await sign({ sub: subject, iat: now, exp: now + 365 * 86_400 })],
    ['signature stripped', `${h}.${p}.`],
    ['signature of another token', `${h}.${b64({ sub: otherSubject, iat: now, exp: now + 999 })}.${s}`],
    ['alg none', `${b64({ alg: 'none', kid })}.${p}.`],
    ['alg None', `${b64({ alg: 'None', kid })}.${p}.`],
    [
      'alg HS384',
      await new SignJWT({ sub: subject })
        .setProtectedHeader({ alg: 'HS384', kid })
        .setIssuedAt(now)
        .setExpirationTime(now + 3600)
        .sign(secretKey(secret)),
    ],
    ['alg RS256 header with HMAC signature', `${b64({ alg: 'RS256', kid })}.${p}.${s}`],
    ['kid with SQL', await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: "APK_x_1' OR '1'='1" })],
    ['kid too long', await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: `APK_${'a'.repeat(500)}_1` })],
    ['kid number', await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: 42 })],
    ['kid with path', await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: '../../etc/passwd' })],
    [
      'jku header',
      await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: 'APK_unknown_1', jku: 'http://127.0.0.1:1/jwks' }),
    ],
    [
      'x5u header',
      await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: 'APK_unknown_1', x5u: 'http://127.0.0.1:1/cert' }),
    ],
    [
      'embedded jwk',
      await sign({ sub: subject, iat: now, exp: now + 60 }, { kid: 'APK_unknown_1', jwk: { kty: 'oct', k: 'AAAA' } }),
    ],
    [
      'crit header',
      (() => {
        const input = `${b64({ alg: 'HS256', kid, crit: ['exp2'], exp2: 1 })}.${b64({ sub: subject, iat: now, exp: now + 60 })}`;
        return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
      })(),
    ],
    ['expired', await sign({ sub: subject, iat: now - 100, exp: now - 60 })],
    ['expired within tolerance + 10 s', await sign({ sub: subject, iat: now - 100, exp: now - 15 })],
    ['nbf in the future', await sign({ sub: subject, iat: now, exp: now + 60, nbf: now + 60 })],
    ['iat in the future', await sign({ sub: subject, iat: now + 600, exp: now + 900 })],
    ['exp as string', await sign({ sub: subject, iat: now, exp: String(now + 60) })],
    ['sub as number', await sign({ sub: 12345, iat: now, exp: now + 60 })],
    ['sub empty', await sign({ sub: '', iat: now, exp: now + 60 })],
    ['sub with SQL (no such account)', await sign({ sub: "USR_x' OR 1=1 --", iat: now, exp: now + 60 })],
    ['missing exp', await sign({ sub: subject, iat: now })],
    ['missing iat', await sign({ sub: subject, exp: now + 60 })],
    ['missing sub', await sign({ iat: now, exp: now + 60 })],
    [
      'wrong secret',
      await new SignJWT({ sub: subject })
        .setProtectedHeader({ alg: 'HS256', kid })
        .setIssuedAt(now)
        .setExpirationTime(now + 3600)
        .sign(secretKey('x'.repeat(40))),
    ],
    ['empty bearer', ''],
    ['garbage', 'garbage'],
    ['unicode', 'tökén.ünïcödé.sïg'],
  ];
}
