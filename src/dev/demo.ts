import { mintAccessToken } from '../auth/tokens.js';
import type { Config } from '../config.js';
import type { Database } from '../db/database.js';
import { seed } from './demo-data.js';

export type DemoAccess = {
  /** Whether this start seeded the demo (the database was empty). */
  seeded: boolean;
  parent: { userID: string; token: string; publicKey: string };
  child?: { userID: string; token: string };
};

const DEMO_TTL_SECONDS = 24 * 60 * 60;

/**
 * On an empty database: a small demo (one organization per alert level) so the API can be tried at
 * once. Either way, tokens for a parent (the first seeded one, or else the oldest parent) and one of
 * its active children, for the start banner and GraphiQL's headers in development. Development
 * tooling: the server imports this module only when SEED_DEMO_ON_START is on.
 */
export async function seedDemoIfEmpty(database: Database, config: Config): Promise<DemoAccess | undefined> {
  const empty = (await database.prisma.organization.count()) === 0;
  const seeded = empty
    ? await seed(database, { organizations: 4, childrenPerOrganization: 25, seed: 1, now: new Date() })
    : undefined;
  const parent = seeded
    ? { id: seeded[0]!.parent.userID, publicKey: seeded[0]!.parent.publicKey }
    : await database.prisma.account.findFirst({
        where: { type: 'parent', organization: { isNot: null } },
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
        select: { id: true, publicKey: true },
      });
  if (!parent) return undefined;
  const org = await database.prisma.organization.findUniqueOrThrow({
    where: { parentId: parent.id },
    select: { jwtSecret: true },
  });
  const child = await database.prisma.account.findFirst({
    where: { parentId: parent.id, status: 'active' },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    select: { id: true },
  });
  const mint = (subject: string) =>
    mintAccessToken({
      secret: org.jwtSecret,
      kid: parent.publicKey,
      subject,
      ttlSeconds: DEMO_TTL_SECONDS,
      issuer: config.jwt.issuer,
      audience: config.jwt.audience,
    });
  return {
    seeded: seeded !== undefined,
    parent: { userID: parent.id, token: await mint(parent.id), publicKey: parent.publicKey },
    child: child ? { userID: child.id, token: await mint(child.id) } : undefined,
  };
}
