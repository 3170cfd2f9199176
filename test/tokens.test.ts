import { decodeProtectedHeader, jwtVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { mintAccessToken, parseTtl } from '../src/auth/tokens.js';
import { secretKey } from '../src/domain/signing-keys.js';
import { findTokenSubject } from '../src/db/accounts.js';
import { seed } from '../src/dev/demo-data.js';
import { testMode, useTestDatabase } from './helpers/database.js';

describe(`token minting (${testMode})`, () => {
  const database = useTestDatabase();

  it("verifies with the organization's secret and not with another organization's", async () => {
    const [orgA, orgB] = await seed(database(), {
      organizations: 2,
      childrenPerOrganization: 3,
      seed: 11,
      now: new Date(),
    });
    const child = await database().prisma.account.findFirstOrThrow({ where: { parentId: orgA!.parent.userID } });
    const found = await findTokenSubject(database().prisma, child.id);
    expect(found.kind).toBe('found');
    if (found.kind !== 'found') return;
    expect(found.kid).toBe(orgA!.parent.publicKey);
    const token = await mintAccessToken({ secret: found.secret, kid: found.kid, subject: child.id, ttlSeconds: 600 });

    const header = decodeProtectedHeader(token);
    expect(header).toMatchObject({ alg: 'HS256', kid: orgA!.parent.publicKey });
    const { payload } = await jwtVerify(token, secretKey(found.secret), { algorithms: ['HS256'] });
    expect(payload.sub).toBe(child.id);
    expect(payload.exp! - payload.iat!).toBe(600);
    expect(Math.abs(payload.iat! - Date.now() / 1000)).toBeLessThan(5);

    const other = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: orgB!.parent.userID } });
    await expect(jwtVerify(token, secretKey(other.jwtSecret), { algorithms: ['HS256'] })).rejects.toThrow(
      /signature verification failed/,
    );
  });

  it('finds accounts by email case-insensitively and says when none matches', async () => {
    const parent = await database().prisma.account.findFirstOrThrow({ where: { type: 'parent' } });
    const found = await findTokenSubject(database().prisma, parent.email.toUpperCase());
    expect(found).toMatchObject({ kind: 'found', userID: parent.id, accountType: 'parent' });
    expect(await findTokenSubject(database().prisma, 'nobody@example.org')).toEqual({ kind: 'none' });
    expect(await findTokenSubject(database().prisma, 'USR_doesnotexist')).toEqual({ kind: 'none' });
  });

  it('parses lifetimes and refuses nonsense', () => {
    expect(parseTtl('90')).toBe(90);
    expect(parseTtl('15m')).toBe(900);
    expect(parseTtl('1h')).toBe(3600);
    expect(parseTtl('7d')).toBe(604800);
    for (const bad of ['', '0', '1w', '-5m', '1.5h', 'soon']) expect(() => parseTtl(bad)).toThrow();
  });
});
