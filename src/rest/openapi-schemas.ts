import { z } from 'zod';
import { PACKAGES } from '../domain/catalogue.js';
import { MAX_LIMIT } from '../services/list-child-accounts.js';

/*
 * The REST answers' bodies as zod schemas, and every error code: what the OpenAPI document
 * (openapi.ts) describes and the tests validate answers against.
 */

const timestamp = (what: string) =>
  z
    .number()
    .int()
    .meta({ description: `${what}: milliseconds since the epoch (UTC).`, example: 1716200000000 });
const nullableTimestamp = (what: string) =>
  z
    .number()
    .int()
    .nullable()
    .meta({
      description: `${what}: milliseconds since the epoch (UTC), or null when it never happened.`,
      example: null,
    });
const count = (description: string) => z.number().int().min(0).meta({ description });

const PackagePurchase = z
  .object({
    packageType: z.enum(Object.keys(PACKAGES) as [string, ...string[]]).meta({ description: 'The package bought.' }),
    purchaseDate: timestamp('When it was bought'),
    creditsAdded: z.number().int().meta({ description: 'Credits the purchase added.' }),
    freeUsersAdded: z.number().int().meta({ description: 'Free users the purchase added to the quota.' }),
    price: z.number().meta({ description: 'Price paid, in dollars.', example: 10 }),
    transactionId: z.string().meta({ description: 'The payment transaction reference.' }),
  })
  .meta({ id: 'PackagePurchase', description: 'One package purchase. Lists of them are newest first.' });

const ProviderASsoConfig = z.object({ enabled: z.boolean(), clientId: z.string() }).meta({
  id: 'ProviderASsoConfig',
  description: 'Single sign-on through provider A: whether it is on, and the public client id.',
});

const userFields = {
  userID: z.string().meta({ description: 'The account id, `USR_<id>`.', example: 'USR_7f3a9c' }),
  username: z.string(),
  email: z.string(),
  publicKey: z
    .string()
    .meta({ description: "The organization's public key, `APK_<id>_<digits>`.", example: 'APK_7f3a9c_1716200000000' }),
  parentAccount: z.string().meta({ description: "`ROOT` for a parent; the parent's public key for a child." }),
  accountStatus: z.enum(['active', 'inactive', 'locked']),
  emailVerified: z.boolean(),
  createdAt: timestamp('Registration time'),
  updatedAt: timestamp('Last update'),
  lastLogin: nullableTimestamp('Last login'),
  organizationName: z.string(),
  domainRestrictionEnabled: z.boolean(),
  emailVerificationRequired: z.boolean(),
  organizationId: z.null().meta({ description: 'Always null.' }),
  authProvider: z.string().meta({ description: 'Primary sign-in provider: `email` or `providerA`.' }),
  lastLoginProvider: z.string().nullable(),
  providerAId: z.string().nullable().meta({ description: 'Linked provider A account id.' }),
  childSignupCount: count('Child sign-ups (5 credits each).'),
  signInCount: count('Sign-ins (1 credit each).'),
  emailConfirmationCount: count('Email confirmations (2 credits each).'),
  providerAAuthCount: count('Provider A authentications (3 credits each).'),
  providerBAuthCount: count('Provider B authentications (3 credits each).'),
  providerCAuthCount: count('Provider C authentications (3 credits each).'),
  providerDAuthCount: count('Provider D authentications (3 credits each).'),
  lastPasswordChanged: nullableTimestamp('Last password change'),
  loginAttempts: count('Failed login attempts.'),
  lastLoginAttempt: nullableTimestamp('Last login attempt'),
  lockedUntil: nullableTimestamp('End of the lock'),
  lastResetPasswordRequestAt: nullableTimestamp('Last password-reset request'),
};

const ParentUser = z
  .strictObject({
    ...userFields,
    accountType: z.literal('parent'),
    organizationUrl: z.string(),
    authUrls: z
      .strictObject({ signin: z.string(), signup: z.string() })
      .meta({ description: 'Absolute URLs of the sign-in and sign-up pages.' }),
    creditBalance: z.number().int().meta({ description: 'Credits available.' }),
    totalFreeUsers: count('Free-user quota from all packages.'),
    billableChildAccounts: count('Children above the free-user quota.'),
    totalChildAccounts: count('Children of the organization.'),
    packagesHistory: z.array(PackagePurchase),
    accountBalance: z.number().meta({ description: 'Legacy dollar balance, kept for compatibility.' }),
    availableBalance: z.number().meta({ description: 'Legacy available balance, kept for compatibility.' }),
    providerASsoConfig: ProviderASsoConfig,
    lastLowCreditNotificationAt: nullableTimestamp('Last low-credit notification'),
    lastCriticalCreditNotificationAt: nullableTimestamp('Last critical-credit notification'),
    lastDepletedCreditNotificationAt: nullableTimestamp('Last depleted-credit notification'),
  })
  .meta({
    id: 'ParentUser',
    description: "A parent's profile: the organization's credit, billing and SSO fields included.",
  });

const ChildUser = z
  .strictObject({
    ...userFields,
    accountType: z.literal('child'),
    organizationUrl: z.null(),
    authUrls: z.null(),
  })
  .meta({
    id: 'ChildUser',
    description: "A child's profile: no credit, billing or SSO fields; its counters count its own activity.",
  });

export const UserProfileResponse = z
  .strictObject({
    success: z.literal(true),
    data: z.strictObject({ message: z.string(), user: z.discriminatedUnion('accountType', [ParentUser, ChildUser]) }),
  })
  .meta({ id: 'UserProfileResponse' });

export const OrganizationDetailsResponse = z
  .strictObject({
    success: z.literal(true),
    data: z.strictObject({
      message: z.string(),
      organizationName: z.string(),
      organizationUrl: z.string(),
      authUrls: z.strictObject({
        signin: z.string(),
        signup: z.string(),
        verify: z.string(),
        reset: z.string(),
        update: z.string(),
        resend: z.string(),
        successful: z.string(),
      }),
      domainRestrictionEnabled: z.boolean(),
      emailVerificationRequired: z.boolean(),
      providerASsoConfig: ProviderASsoConfig,
      credentials: z.strictObject({
        publicKey: z.string(),
        jwtSecret: z.string().meta({
          description:
            'The signing secret only when the parent itself asks with a token; `********` for every other caller.',
          example: '********',
        }),
      }),
    }),
  })
  .meta({
    id: 'OrganizationDetailsResponse',
    description: "Each answer adds one to the organization's retrieval count.",
  });

const isoDateTime = z.string().meta({ format: 'date-time', example: '2024-05-20T10:13:20.000Z' });

export const ChildAccountsResponse = z
  .strictObject({
    success: z.literal(true),
    data: z.strictObject({
      data: z.strictObject({
        stats: z
          .strictObject({
            total: count('Children matching the search and dates.'),
            active: count('Of those, the ones who logged in within 30 days.'),
          })
          .meta({ description: 'Counts over every child matching the filters, not only the page.' }),
        accounts: z.array(
          z.strictObject({
            username: z.string(),
            email: z.string(),
            lastSeen: isoDateTime
              .nullable()
              .meta({ description: 'Last login, or null when the child never logged in.' }),
            registered: isoDateTime.meta({ description: 'Registration time.' }),
          }),
        ),
        pagination: z.strictObject({
          limit: z.number().int().min(1).max(MAX_LIMIT),
          hasMore: z.boolean(),
          nextPageToken: z
            .string()
            .optional()
            .meta({ description: 'Present when hasMore: send it as `lastKey` for the next page.' }),
        }),
      }),
    }),
  })
  .meta({ id: 'ChildAccountsResponse', description: 'Newest registration first. Note the doubled `data`.' });

export const CreditAnalysisResponse = z
  .strictObject({
    creditBalance: z.number().int(),
    totalFreeUsers: count('Free-user quota from all packages.'),
    totalChildAccounts: count('Children of the organization.'),
    billableUsers: count('max(0, totalChildAccounts - totalFreeUsers).'),
    monthlyRetentionCredits: count('billableUsers x 1.'),
    operationUsage: z
      .strictObject({
        childSignups: count('This month.'),
        signIns: count('This month.'),
        emailVerifications: count('This month.'),
        socialSignIns: z.strictObject({
          providerA: count(''),
          providerB: count(''),
          providerC: count(''),
          providerD: count(''),
          total: count('The sum of the four.'),
        }),
      })
      .meta({ description: 'Usage in the current calendar month (UTC).' }),
    totalCreditsUsed: count(
      'childSignups x 5 + signIns x 1 + emailVerifications x 2 + socialSignIns.total x 3, this month.',
    ),
    projectedMonthlyUsage: count(
      'round(totalCreditsUsed / elapsed days x days in the month) + monthlyRetentionCredits.',
    ),
    alerts: z
      .strictObject({ low: z.boolean(), critical: z.boolean(), depleted: z.boolean() })
      .meta({ description: 'depleted: balance <= 0; critical: <= 10 % of all credits purchased; low: <= 20 %.' }),
    packageHistory: z.array(PackagePurchase),
  })
  .meta({ id: 'CreditAnalysisResponse', description: 'The analysis itself is the body: no success/data envelope.' });

/** Every error code an answer of the API can carry (decisions §6 and the transport's bounds). */
export const ERROR_CODES = [
  'UNAUTHORIZED',
  'UNAUTHORIZED_ACCESS',
  'ACCOUNT_INACTIVE',
  'CREDITS_DEPLETED',
  'USER_NOT_FOUND',
  'MISSING_PARENT_PUBLIC_KEY',
  'INVALID_PARENT_ACCOUNT',
  'INVALID_DATE_FORMAT',
  'INVALID_LIMIT',
  'INVALID_PAGINATION_TOKEN',
  'INVALID_SEARCH',
  'INVALID_FORMAT',
  'BAD_REQUEST',
  'NOT_FOUND',
  'METHOD_NOT_ALLOWED',
  'PAYLOAD_TOO_LARGE',
  'URI_TOO_LONG',
  'REQUEST_HEADER_FIELDS_TOO_LARGE',
  'RATE_LIMITED',
  'EXPORT_BUSY',
  'SEARCH_BUSY',
  'SERVICE_UNAVAILABLE',
  'INTERNAL_ERROR',
] as const;

export const ErrorResponse = z
  .strictObject({
    success: z.literal(false),
    error: z.strictObject({
      code: z.enum(ERROR_CODES).meta({ description: 'The contract: clients branch on it.' }),
      message: z.string().meta({ description: 'For people; may change.' }),
    }),
  })
  .meta({ id: 'ErrorResponse', description: 'The error envelope of every path.' });

export type Code = (typeof ERROR_CODES)[number];
