import { describe, expect, it } from 'vitest';
import { mintAccessToken } from '../src/auth/tokens.js';
import { estimateBytes } from '../src/db/estimate-bytes.js';
import { seed } from '../src/dev/demo-data.js';
import { rest, startServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const USERS = 3_000;

/**
 * What the cache holds for each signed-in user (a verified token and an account row) decides how
 * many users a large organization can have before answers go to the database. The byte bound
 * (CACHE_MAX_BYTES) counts estimates; test/bench/cache-memory.ts holds them to the heap V8 really
 * uses, and prints both.
 */
describe(`the cache's memory per user (${testMode})`, () => {
  const database = useTestDatabase();

  it('the estimate counts what a value holds beyond its slots', () => {
    // A small integer, a boolean and null live in their slots; a large number is a boxed double.
    expect(estimateBytes({ a: 1, b: true, c: null, d: undefined })).toBe(32 + 4 * 8);
    expect(estimateBytes({ at: 1_790_000_000_000 })).toBe(32 + 8 + 16);
    // A string: its header and characters, two bytes a character outside Latin-1.
    expect(estimateBytes({ id: `USR_${'x'.repeat(20)}` })).toBe(32 + 8 + 16 + 24);
    expect(estimateBytes({ text: 'ü'.repeat(4) + '✓'.repeat(4) })).toBe(32 + 8 + 16 + 16);
  });

  it('every signed-in user is held, and the byte bound counts a bounded estimate for each', async () => {
    const [organization] = await seed(database(), {
      organizations: 1,
      childrenPerOrganization: USERS,
      seed: 5,
      now: new Date(),
    });
    const parentId = organization!.parent.userID;
    const { jwtSecret } = await database().prisma.organization.findUniqueOrThrow({ where: { parentId } });
    // Usable children of a funded organization: every one of them is answered.
    await database().sql.query('UPDATE "Organization" SET "creditBalance" = 1000000 WHERE "parentId" = $1', [parentId]);
    const children = await database().sql.query<{ id: string }>(
      `SELECT id FROM "Account" WHERE "parentId" = $1 AND status = 'active'`,
      [parentId],
    );
    expect(children.length).toBeGreaterThan(USERS / 2);
    const tokens = await Promise.all(
      children.map((child) =>
        mintAccessToken({
          secret: jwtSecret,
          kid: organization!.parent.publicKey,
          subject: child.id,
          ttlSeconds: 3600,
        }),
      ),
    );
    const server = await startServer(database(), {
      env: { CACHE_MAX_ENTRIES: '100000', CACHE_MAX_BYTES: String(64 * 1024 * 1024) },
    });
    try {
      const { cache } = server.app.deps;
      // Nothing is kept before the change feed is live.
      await cache.caughtUp();
      for (let from = 0; from < tokens.length; from += 50) {
        const answers = await Promise.all(
          tokens.slice(from, from + 50).map((token) => rest(server, '/auth/user-profile', { token })),
        );
        expect(answers.every((answer) => answer.status === 200)).toBe(true);
      }
      // Every user's token and account are held.
      const hitsBefore = cache.stats.hits;
      await rest(server, '/auth/user-profile', { token: tokens[0] });
      expect(cache.stats.hits - hitsBefore).toBeGreaterThanOrEqual(2);
      expect(cache.size).toBeGreaterThanOrEqual(2 * children.length);

      // What the byte bound counts for each user (deterministic); the heap V8 really uses for
      // them is measured by `npm run bench:cache-memory`, not here (a shared machine's heap moves).
      // About 420 bytes: an account's record and a token's, with their index slots (`db/README.md`).
      const estimatedPerUser = cache.bytes / children.length;
      expect(estimatedPerUser).toBeGreaterThan(300);
      expect(estimatedPerUser).toBeLessThan(2200);
    } finally {
      await server.close();
    }
  });
});
