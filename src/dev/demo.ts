import { mintAccessToken } from '../auth/tokens.js';
import type { Config } from '../config.js';
import type { Database } from '../db/database.js';
import { seed, type SeededOrganization } from './demo-data.js';

export type DemoAccess = {
  organizations: SeededOrganization[];
  parent: { userID: string; token: string; publicKey: string };
  child?: { userID: string; token: string };
};

const DEMO_TTL_SECONDS = 24 * 60 * 60;

/**
 * On an empty database: a small demo (one organization per alert level) so the API can be tried at
 * once. Development tooling: the server imports this module only when SEED_DEMO_ON_START is on.
 */
export async function seedDemoIfEmpty(database: Database, config: Config): Promise<DemoAccess | undefined> {
  if ((await database.prisma.organization.count()) > 0) return undefined;
  const organizations = await seed(database, {
    organizations: 4,
    childrenPerOrganization: 25,
    seed: 1,
    now: new Date(),
  });
  const first = organizations[0]!;
  const org = await database.prisma.organization.findUniqueOrThrow({
    where: { parentId: first.parent.userID },
    select: { jwtSecret: true },
  });
  const child = await database.prisma.account.findFirst({
    where: { parentId: first.parent.userID, status: 'active' },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    select: { id: true },
  });
  const mint = (subject: string) =>
    mintAccessToken({
      secret: org.jwtSecret,
      kid: first.parent.publicKey,
      subject,
      ttlSeconds: DEMO_TTL_SECONDS,
      issuer: config.jwt.issuer,
      audience: config.jwt.audience,
    });
  return {
    organizations,
    parent: { userID: first.parent.userID, token: await mint(first.parent.userID), publicKey: first.parent.publicKey },
    child: child ? { userID: child.id, token: await mint(child.id) } : undefined,
  };
}
