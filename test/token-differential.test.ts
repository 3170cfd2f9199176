import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { SignJWT, base64url, decodeProtectedHeader, errors, jwtVerify, type JWTVerifyOptions } from 'jose';
import { describe, expect, it } from 'vitest';
import { isCanonicalJws } from '../src/auth/credentials.js';
import { verifyHs256, type Hs256Key } from '../src/auth/hs256.js';
import { hmacKey, secretKey, verificationKey } from '../src/domain/signing-keys.js';
import { hostileTokens } from './helpers/hostile-tokens.js';

/*
 * The token check's shortcut (node:crypto's HMAC for plain HS256 tokens, jose for the claims)
 * against jose's `jwtVerify`: the same verdict for every token of the hostile-token suite and of a
 * generated corpus, under the API's options and under stricter ones.
 */

const SECRET = 'a-signing-secret-of-at-least-32-bytes!!';
const OTHER_SECRET = 'another-organization-secret-of-32-bytes+';
const KID = 'APK_differential_1';
const NOW = 1_790_000_000;

/** What a verification decides: the payload, or which refusal (jose's code; a claim's name with it). */
async function verdict(check: () => Promise<unknown>): Promise<string> {
  try {
    return `ok ${JSON.stringify(await check())}`;
  } catch (error) {
    if (error instanceof errors.JWTClaimValidationFailed) return `${error.code} ${error.claim} ${error.reason}`;
    if (error instanceof errors.JOSEError) {
      // A form refused as a JWS or as a JWT: both are "invalid" to every caller (no claim involved).
      return error.code === 'ERR_JWS_INVALID' || error.code === 'ERR_JWT_INVALID' ? 'malformed' : error.code;
    }
    return `thrown ${String(error)}`;
  }
}

const API_OPTIONS: JWTVerifyOptions = {
  algorithms: ['HS256'],
  requiredClaims: ['exp', 'iat', 'sub'],
  clockTolerance: 5,
  currentDate: new Date(NOW * 1000),
};
const STRICT_OPTIONS: JWTVerifyOptions = {
  ...API_OPTIONS,
  issuer: 'https://issuer.example',
  audience: 'api',
  maxTokenAge: 600,
};

describe("the HS256 shortcut gives jose's verdict", async () => {
  const key: Hs256Key = { key: await verificationKey(secretKey(SECRET)), hmac: hmacKey(secretKey(SECRET)) };
  /**
   * jose's verdict, the shortcut's checking the token's form itself, and, for a canonical token
   * whose header decodes, the shortcut's given that header as authentication gives it.
   */
  const same = async (token: string, options: JWTVerifyOptions) => {
    const [jose, alone] = await Promise.all([
      verdict(async () => (await jwtVerify(token, key.key, options)).payload),
      verdict(() => verifyHs256(token, key, options)),
    ]);
    let header: Record<string, unknown> | undefined;
    try {
      header = isCanonicalJws(token) ? decodeProtectedHeader(token) : undefined;
    } catch {
      header = undefined;
    }
    const given = header === undefined ? alone : await verdict(() => verifyHs256(token, key, options, header));
    return { jose, ours: given === alone ? alone : `${alone} | given its header: ${given}` };
  };
  const good = await new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT', kid: KID })
    .setSubject('USR_a')
    .setIssuedAt(NOW)
    .setExpirationTime(NOW + 3600)
    .sign(secretKey(SECRET));
  const suite = await hostileTokens({
    secret: SECRET,
    kid: KID,
    subject: 'USR_a',
    otherSubject: 'USR_b',
    good,
    now: NOW,
  });

  it.each([...suite, ['the good token', good] as [string, string]])('hostile-token suite: %s', async (_name, token) => {
    for (const options of [API_OPTIONS, STRICT_OPTIONS]) {
      const { jose, ours } = await same(token, options);
      expect(ours).toBe(jose);
    }
  });

  it('a good token is accepted by both, and the shortcut took it (a wrong HMAC key refuses it)', async () => {
    expect((await same(good, API_OPTIONS)).ours).toMatch(/^ok /);
    // The same WebCrypto key with another node:crypto key: only the shortcut can tell them apart.
    const mismatched: Hs256Key = { key: key.key, hmac: hmacKey(secretKey(OTHER_SECRET)) };
    expect(await verdict(() => verifyHs256(good, mismatched, API_OPTIONS))).toBe(
      'ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
    );
  });

  it('a generated corpus: headers, claims, signatures and segments altered', async () => {
    const b64 = (value: unknown) => base64url.encode(typeof value === 'string' ? value : JSON.stringify(value));
    const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const time = fc.oneof(
      fc.integer({ min: NOW - 4000, max: NOW + 4000 }),
      fc.constantFrom(NOW - 5, NOW - 6, NOW + 5, NOW + 6, NOW, 0, -1, 1e308, Number.MAX_SAFE_INTEGER),
      fc.double({ min: NOW - 20, max: NOW + 20, noNaN: true }),
      fc.constantFrom('soon', null, true, [NOW]),
    );
    const claim = <T>(value: fc.Arbitrary<T>) => fc.option(value, { nil: undefined });
    // Mostly the plain shape the shortcut takes, so that its acceptances and refusals are many.
    const plainHeader = fc.record(
      { alg: fc.constant('HS256'), kid: claim(fc.constant(KID)), typ: claim(fc.constantFrom('JWT', 'jwt', 'at+jwt')) },
      { requiredKeys: ['alg'] },
    );
    const anyHeader = fc.record(
      {
        alg: fc.constantFrom('HS256', 'HS384', 'HS512', 'none', 'None', 'RS256', 'hs256', ''),
        kid: claim(fc.oneof(fc.constant(KID), fc.integer())),
        typ: claim(fc.constantFrom('JWT', 'jwt', 'at+jwt', 'JOSE')),
        crit: claim(fc.constantFrom(['b64'], ['exp2'], [], 'b64')),
        b64: claim(fc.boolean()),
        jwk: claim(fc.constant({ kty: 'oct', k: 'AAAA' })),
        zip: claim(fc.constant('DEF')),
      },
      { requiredKeys: ['alg'] },
    );
    const header = fc.oneof(
      { arbitrary: plainHeader, weight: 6 },
      { arbitrary: anyHeader, weight: 3 },
      { arbitrary: fc.constantFrom<unknown>([1, 2], 'text', null, 42, {}), weight: 1 },
    );
    const payload = fc.oneof(
      fc.record({
        sub: claim(fc.oneof(fc.constantFrom('USR_a', '', 'USR_b'), fc.integer())),
        iat: claim(time),
        exp: claim(time),
        nbf: claim(time),
        iss: claim(fc.constantFrom('https://issuer.example', 'https://other.example')),
        aud: claim(fc.oneof(fc.constantFrom('api', 'other'), fc.constant(['api', 'x']), fc.constant([]))),
        jti: claim(fc.string()),
      }),
      fc.constantFrom<unknown>('not json', [1], null, 7),
    );
    // How the token is spoiled after signing (or not at all).
    const spoil = fc.constantFrom(
      'none',
      'none',
      'none',
      'none',
      'none',
      'none',
      'none',
      'none',
      'other secret',
      'strip signature',
      'truncate signature',
      'truncate payload',
      'truncate header',
      'pad signature',
      'unused bits',
      'flip a signature character',
      'extra segment',
      'drop a segment',
      'payload of another token',
      'raw json payload',
    );
    const verdicts = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(header, payload, spoil, fc.boolean(), async (h, p, how, strict) => {
        const [eh, ep] = [b64(h), b64(p)];
        const sign = (input: string, secret: string) => createHmac('sha256', secret).update(input).digest('base64url');
        const s = sign(`${eh}.${ep}`, how === 'other secret' ? OTHER_SECRET : SECRET);
        const flip = (text: string, at: number) =>
          `${text.slice(0, at)}${B64URL[(B64URL.indexOf(text[at]!) + 1) % 64]}${text.slice(at + 1)}`;
        const token = {
          none: `${eh}.${ep}.${s}`,
          'other secret': `${eh}.${ep}.${s}`,
          'strip signature': `${eh}.${ep}.`,
          'truncate signature': `${eh}.${ep}.${s.slice(0, -2)}`,
          'truncate payload': `${eh}.${ep.slice(0, -1)}.${s}`,
          'truncate header': `${eh.slice(0, -1)}.${ep}.${s}`,
          'pad signature': `${eh}.${ep}.${s}=`,
          'unused bits': `${eh}.${ep}.${s.slice(0, -1)}${B64URL[B64URL.indexOf(s.at(-1)!) ^ 1]}`,
          'flip a signature character': `${eh}.${ep}.${flip(s, 10)}`,
          'extra segment': `${eh}.${ep}.${s}.${s}`,
          'drop a segment': `${ep}.${s}`,
          'payload of another token': `${eh}.${b64({ sub: 'USR_b', iat: NOW, exp: NOW + 60 })}.${s}`,
          'raw json payload': `${eh}.${JSON.stringify(p)}.${sign(`${eh}.${JSON.stringify(p)}`, SECRET)}`,
        }[how]!;
        const { jose, ours } = await same(token, strict ? STRICT_OPTIONS : API_OPTIONS);
        expect(ours).toBe(jose);
        verdicts.set(jose.split(' ')[0]!, (verdicts.get(jose.split(' ')[0]!) ?? 0) + 1);
      }),
      { numRuns: 3000, seed: 51 },
    );
    // The corpus reaches every kind of verdict, acceptances included, many times each.
    for (const kind of [
      'ok',
      'ERR_JWT_EXPIRED',
      'ERR_JWT_CLAIM_VALIDATION_FAILED',
      'ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
      'ERR_JOSE_ALG_NOT_ALLOWED',
      'malformed',
    ]) {
      expect(verdicts.get(kind) ?? 0, kind).toBeGreaterThan(20);
    }
  });
});
