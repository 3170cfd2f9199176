import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { mintAccessToken } from '../src/auth/tokens.js';
import { packAccount, unpackAccount, type AccountRow } from '../src/db/accounts.js';
import { seed } from '../src/dev/demo-data.js';
import { rest, startServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

v8.setFlagsFromString('--expose-gc');
const collect = vm.runInNewContext('gc') as () => void;

function heapUsed(): number {
  for (let i = 0; i < 3; i++) collect();
  return process.memoryUsage().heapUsed;
}

const USERS = 3_000;

/**
 * What the cache holds for each signed-in user (a verified token and an account row) decides how
 * many users a large organization can have before answers go to the database. The byte bound
 * (CACHE_MAX_BYTES) counts estimates; these tests hold the estimates to the heap V8 really uses.
 */
describe(`the cache's memory per user (${testMode})`, () => {
  const database = useTestDatabase();

  it('a cached account reads back exactly as loaded', async () => {
    const [organization] = await seed(database(), { organizations: 1, childrenPerOrganization: 20, seed: 4, now: new Date() });
    const rows = await database().sql.query<AccountRow>('SELECT * FROM "Account" WHERE "parentId" = $1 OR id = $1', [organization!.parent.userID]);
    expect(rows.length).toBe(21);
    for (const row of rows) {
      const { passwordHash, emailVerificationToken, passwordResetToken, ...readable } = row as AccountRow & Record<string, unknown>;
      expect(unpackAccount(packAccount(readable as AccountRow))).toEqual(readable);
    }
  });

  it('each user costs about a kilobyte of heap, and the byte bound counts at least what is held', async () => {
    const [organization] = await seed(database(), { organizations: 1, childrenPerOrganization: USERS, seed: 5, now: new Date() });
    const parentId = organization!.parent.userID;
    const { jwtSecret } = await database().prisma.organization.findUniqueOrThrow({ where: { parentId } });
    // Usable children of a funded organization: every one of them is answered.
    await database().sql.query('UPDATE "Organization" SET "creditBalance" = 1000000 WHERE "parentId" = $1', [parentId]);
    const children = await database().sql.query<{ id: string }>(`SELECT id FROM "Account" WHERE "parentId" = $1 AND status = 'active'`, [parentId]);
    expect(children.length).toBeGreaterThan(USERS / 2);
    const tokens = await Promise.all(
      children.map((child) => mintAccessToken({ secret: jwtSecret, kid: organization!.parent.publicKey, subject: child.id, ttlSeconds: 3600 })),
    );
    const server = await startServer(database(), { env: { CACHE_MAX_ENTRIES: '100000', CACHE_MAX_BYTES: String(64 * 1024 * 1024) } });
    try {
      const { cache } = server.app.deps;
      for (let from = 0; from < tokens.length; from += 50) {
        const answers = await Promise.all(tokens.slice(from, from + 50).map((token) => rest(server, '/auth/user-profile', { token })));
        expect(answers.every((answer) => answer.status === 200)).toBe(true);
      }
      // Every user's token and account are held.
      const hitsBefore = cache.stats.hits;
      await rest(server, '/auth/user-profile', { token: tokens[0] });
      expect(cache.stats.hits - hitsBefore).toBeGreaterThanOrEqual(2);
      expect(cache.size).toBeGreaterThanOrEqual(2 * children.length);

      const estimated = cache.bytes;
      const held = heapUsed();
      cache.clear();
      const freed = held - heapUsed();
      const perUser = freed / children.length;
      console.log(`cache: ${Math.round(perUser)} bytes of heap per user, estimated ${Math.round(estimated / children.length)}`);
      expect(perUser).toBeLessThan(1100);
      expect(estimated).toBeGreaterThanOrEqual(freed);
      // And not so pessimistic that the bound keeps far fewer users than it could.
      expect(estimated).toBeLessThan(2 * freed);
    } finally {
      await server.close();
    }
  });
});
