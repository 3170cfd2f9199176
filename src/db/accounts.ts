import type { PrismaClient } from '../generated/prisma/client.js';

export type TokenSubject =
  | { kind: 'found'; userID: string; kid: string; secret: string; accountType: 'parent' | 'child' }
  | { kind: 'ambiguous'; userIDs: string[] }
  | { kind: 'none' };

/** The account a development token is minted for, by userID or email, with its organization's key and secret. */
export async function findTokenSubject(prisma: PrismaClient, who: string): Promise<TokenSubject> {
  const accounts = await prisma.account.findMany({
    where: who.startsWith('USR_') ? { id: who } : { email: { equals: who, mode: 'insensitive' } },
    select: { id: true, type: true, parentId: true },
    take: 10,
  });
  if (accounts.length === 0) return { kind: 'none' };
  if (accounts.length > 1) return { kind: 'ambiguous', userIDs: accounts.map((a) => a.id) };
  const account = accounts[0]!;
  const organization = await prisma.organization.findUnique({
    where: { parentId: account.parentId ?? account.id },
    select: { jwtSecret: true, parent: { select: { publicKey: true } } },
  });
  if (!organization) return { kind: 'none' };
  return {
    kind: 'found',
    userID: account.id,
    kid: organization.parent.publicKey,
    secret: organization.jwtSecret,
    accountType: account.type,
  };
}
