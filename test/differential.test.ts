import { beforeAll, describe, expect, it } from 'vitest';
import { seed, type SeededOrganization } from '../src/dev/demo-data.js';
import { mintAccessToken } from '../src/auth/tokens.js';
import { rest, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * Both transports must carry the same data: every seeded parent and a sample of children ask
 * both the same things, and the answers are compared after converting REST's millisecond
 * timestamps and GraphQL's ISO strings to one form.
 */

const now = new Date();

const PROFILE = `{ me { userID username email publicKey accountType parentAccount accountStatus emailVerified createdAt updatedAt
  lastLogin organizationName domainRestrictionEnabled emailVerificationRequired authProvider lastLoginProvider providerAId
  childSignupCount signInCount emailConfirmationCount providerAAuthCount providerBAuthCount providerCAuthCount providerDAuthCount
  lastPasswordChanged loginAttempts lastLoginAttempt lockedUntil lastResetPasswordRequestAt
  ... on ParentAccount { organizationUrl authUrls { signin signup } creditBalance totalFreeUsers billableChildAccounts totalChildAccounts
    packagesHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } accountBalance availableBalance
    providerASsoConfig { enabled clientId } lastLowCreditNotificationAt lastCriticalCreditNotificationAt lastDepletedCreditNotificationAt } } }`;
const ORGANIZATION = `{ organization { organizationName organizationUrl authUrls { signin signup verify reset update resend successful }
  domainRestrictionEnabled emailVerificationRequired providerASsoConfig { enabled clientId } credentials { publicKey jwtSecret } } }`;
const ANALYSIS = `{ creditAnalysis { creditBalance totalFreeUsers totalChildAccounts billableUsers monthlyRetentionCredits
  operationUsage { childSignups signIns emailVerifications socialSignIns { providerA providerB providerC providerD total } }
  totalCreditsUsed projectedMonthlyUsage alerts { low critical depleted }
  packageHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } } }`;
const PAGE = `query($search: String, $startDate: String, $endDate: String, $limit: Int, $after: String) {
  childAccounts(search: $search, startDate: $startDate, endDate: $endDate, limit: $limit, after: $after) {
    edges { cursor node { username email lastSeen registered } } pageInfo { hasNextPage endCursor } stats { total active } } }`;

const TIMESTAMP_FIELDS = new Set([
  'createdAt',
  'updatedAt',
  'lastLogin',
  'lastPasswordChanged',
  'lastLoginAttempt',
  'lockedUntil',
  'lastResetPasswordRequestAt',
  'purchaseDate',
  'lastLowCreditNotificationAt',
  'lastCriticalCreditNotificationAt',
  'lastDepletedCreditNotificationAt',
]);

/** ISO strings of timestamp fields to milliseconds, recursively. */
function normalize(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((v) => normalize(v));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalize(v, k)]));
  }
  if (TIMESTAMP_FIELDS.has(key) && typeof value === 'string') return Date.parse(value);
  return value;
}

describe(`REST and GraphQL agree (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { now: () => now });
  let organizations: SeededOrganization[];
  const tokens = new Map<string, string>();

  beforeAll(async () => {
    organizations = await seed(database(), { organizations: 4, childrenPerOrganization: 60, seed: 99, now });
    for (const org of organizations) {
      const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: org.parent.userID } });
      const sample = await database().prisma.account.findMany({
        where: { parentId: org.parent.userID },
        take: 6,
        orderBy: { id: 'asc' },
      });
      for (const account of [{ id: org.parent.userID }, ...sample]) {
        tokens.set(
          account.id,
          await mintAccessToken({
            secret: row.jwtSecret,
            kid: org.parent.publicKey,
            subject: account.id,
            ttlSeconds: 600,
            now,
          }),
        );
      }
    }
  });

  it('profile, organization and credit analysis, for every parent and sampled children', async () => {
    let compared = 0;
    for (const [userID, token] of tokens) {
      const restProfile = await rest(server(), '/auth/user-profile', { token });
      const gqlProfile = await server().graphql<{ me: Record<string, unknown> }>(PROFILE, { token });
      if (restProfile.status !== 200) {
        // Refused callers must be refused the same way by both.
        expect(gqlProfile.errors?.[0]?.extensions?.code).toBe(restProfile.body.error.code);
        continue;
      }
      const { organizationId, ...restUser } = restProfile.body.data.user;
      expect(organizationId).toBeNull();
      const gqlUser = normalize(gqlProfile.data!.me) as Record<string, unknown>;
      if (restUser.accountType === 'child') {
        expect(restUser.organizationUrl).toBeNull();
        expect(restUser.authUrls).toBeNull();
        delete restUser.organizationUrl;
        delete restUser.authUrls;
      }
      expect(gqlUser).toEqual(restUser);

      const restOrg = await rest(server(), '/auth/organization-details', { token });
      const gqlOrg = await server().graphql<{ organization: unknown }>(ORGANIZATION, { token });
      const { message, ...details } = restOrg.body.data;
      expect(typeof message).toBe('string');
      expect(gqlOrg.data!.organization).toEqual(details);

      if (restUser.accountType === 'parent') {
        const restAnalysis = await rest(server(), '/parent/credit-analysis', { token });
        const gqlAnalysis = await server().graphql<{ creditAnalysis: unknown }>(ANALYSIS, { token });
        expect(normalize(gqlAnalysis.data!.creditAnalysis)).toEqual(restAnalysis.body);
      }
      compared++;
      expect(userID).toMatch(/^USR_/);
    }
    expect(compared).toBeGreaterThanOrEqual(organizations.length);
  });

  it('every page of child accounts, with several filter sets', async () => {
    const filterSets: Record<string, string>[] = [
      { limit: '7' },
      { limit: '25', search: 'a' },
      { limit: '10', startDate: new Date(now.getTime() - 365 * 86_400_000).toISOString().slice(0, 10) },
      { limit: '13', search: 'example', endDate: String(now.getTime() - 100 * 86_400_000) },
    ];
    for (const org of organizations) {
      const token = tokens.get(org.parent.userID)!;
      for (const filters of filterSets) {
        let lastKey: string | undefined;
        let after: string | undefined;
        for (let pageNumber = 0; ; pageNumber++) {
          const query = new URLSearchParams({ ...filters, ...(lastKey ? { lastKey } : {}) });
          const restPage = (await rest(server(), `/auth/child-accounts?${query}`, { token })).body.data.data;
          const gqlPage = (
            await server().graphql<{
              childAccounts: {
                edges: { cursor: string; node: unknown }[];
                pageInfo: { hasNextPage: boolean; endCursor: string | null };
                stats: unknown;
              };
            }>(PAGE, { token, variables: { ...filters, limit: Number(filters.limit), after } })
          ).data!.childAccounts;
          expect(gqlPage.stats).toEqual(restPage.stats);
          expect(gqlPage.edges.map((e) => e.node)).toEqual(restPage.accounts);
          expect(gqlPage.pageInfo.hasNextPage).toBe(restPage.pagination.hasMore);
          if (!restPage.pagination.hasMore) break;
          expect(gqlPage.pageInfo.endCursor).toBe(restPage.pagination.nextPageToken);
          lastKey = restPage.pagination.nextPageToken;
          after = gqlPage.pageInfo.endCursor!;
          expect(pageNumber).toBeLessThan(20);
        }
      }
    }
  });
});
