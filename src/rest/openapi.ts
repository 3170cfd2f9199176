import { z } from 'zod';
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiResponseObject } from 'zod-openapi';
import { PACKAGES } from '../domain/catalogue.js';
import { DEFAULT_LIMIT, MAX_LIMIT, MAX_SEARCH_LENGTH } from '../services/list-child-accounts.js';
import { EXPORT_PATH } from './export.js';

/**
 * The OpenAPI 3.1 description of the four REST paths and the child-list export beside them, built from zod schemas. A test validates
 * the document and every answer the REST tests receive against it, so it cannot drift from the
 * code. Served at /openapi.json, and read by the reference page at /docs.
 */

const timestamp = (what: string) => z.number().int().meta({ description: `${what}: milliseconds since the epoch (UTC).`, example: 1716200000000 });
const nullableTimestamp = (what: string) =>
  z.number().int().nullable().meta({ description: `${what}: milliseconds since the epoch (UTC), or null when it never happened.`, example: null });
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

const ProviderASsoConfig = z
  .object({ enabled: z.boolean(), clientId: z.string() })
  .meta({ id: 'ProviderASsoConfig', description: 'Single sign-on through provider A: whether it is on, and the public client id.' });

const userFields = {
  userID: z.string().meta({ description: 'The account id, `USR_<id>`.', example: 'USR_7f3a9c' }),
  username: z.string(),
  email: z.string(),
  publicKey: z.string().meta({ description: "The organization's public key, `APK_<id>_<digits>`.", example: 'APK_7f3a9c_1716200000000' }),
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
    authUrls: z.strictObject({ signin: z.string(), signup: z.string() }).meta({ description: 'Absolute URLs of the sign-in and sign-up pages.' }),
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
  .meta({ id: 'ParentUser', description: "A parent's profile: the organization's credit, billing and SSO fields included." });

const ChildUser = z
  .strictObject({
    ...userFields,
    accountType: z.literal('child'),
    organizationUrl: z.null(),
    authUrls: z.null(),
  })
  .meta({ id: 'ChildUser', description: "A child's profile: no credit, billing or SSO fields; its counters count its own activity." });

const UserProfileResponse = z
  .strictObject({
    success: z.literal(true),
    data: z.strictObject({ message: z.string(), user: z.discriminatedUnion('accountType', [ParentUser, ChildUser]) }),
  })
  .meta({ id: 'UserProfileResponse' });

const OrganizationDetailsResponse = z
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
          description: 'The signing secret only when the parent itself asks with a token; `********` for every other caller.',
          example: '********',
        }),
      }),
    }),
  })
  .meta({ id: 'OrganizationDetailsResponse', description: 'Each answer adds one to the organization\'s retrieval count.' });

const isoDateTime = z.string().meta({ format: 'date-time', example: '2024-05-20T10:13:20.000Z' });

const ChildAccountsResponse = z
  .strictObject({
    success: z.literal(true),
    data: z.strictObject({
      data: z.strictObject({
        stats: z
          .strictObject({ total: count('Children matching the search and dates.'), active: count('Of those, the ones who logged in within 30 days.') })
          .meta({ description: 'Counts over every child matching the filters, not only the page.' }),
        accounts: z.array(
          z.strictObject({
            username: z.string(),
            email: z.string(),
            lastSeen: isoDateTime.nullable().meta({ description: 'Last login, or null when the child never logged in.' }),
            registered: isoDateTime.meta({ description: 'Registration time.' }),
          }),
        ),
        pagination: z.strictObject({
          limit: z.number().int().min(1).max(MAX_LIMIT),
          hasMore: z.boolean(),
          nextPageToken: z.string().optional().meta({ description: 'Present when hasMore: send it as `lastKey` for the next page.' }),
        }),
      }),
    }),
  })
  .meta({ id: 'ChildAccountsResponse', description: 'Newest registration first. Note the doubled `data`.' });

const CreditAnalysisResponse = z
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
        socialSignIns: z.strictObject({ providerA: count(''), providerB: count(''), providerC: count(''), providerD: count(''), total: count('The sum of the four.') }),
      })
      .meta({ description: 'Usage in the current calendar month (UTC).' }),
    totalCreditsUsed: count('childSignups x 5 + signIns x 1 + emailVerifications x 2 + socialSignIns.total x 3, this month.'),
    projectedMonthlyUsage: count('round(totalCreditsUsed / elapsed days x days in the month) + monthlyRetentionCredits.'),
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
  'SERVICE_UNAVAILABLE',
  'INTERNAL_ERROR',
] as const;

const ErrorResponse = z
  .strictObject({
    success: z.literal(false),
    error: z.strictObject({
      code: z.enum(ERROR_CODES).meta({ description: 'The contract: clients branch on it.' }),
      message: z.string().meta({ description: 'For people; may change.' }),
    }),
  })
  .meta({ id: 'ErrorResponse', description: 'The error envelope of every path.' });

type Code = (typeof ERROR_CODES)[number];

const requestId = z.string().meta({ description: 'The request id: the sent `X-Request-Id` when it is sane, a new UUID otherwise. It is in the log line.' });
const retryAfter = z.string().meta({ description: 'Seconds to wait before trying again.' });

function errorResponse(description: string, codes: Code[], headers?: Record<string, z.ZodType>): ZodOpenApiResponseObject {
  const schema = ErrorResponse.extend({
    error: z.strictObject({ code: z.enum(codes as [Code, ...Code[]]), message: z.string() }),
  });
  return {
    description: `${description} Codes: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    headers: z.object({ 'X-Request-Id': requestId, ...headers }),
    content: { 'application/json': { schema, examples: Object.fromEntries(codes.map((code) => [code, { value: { success: false, error: { code, message: '…' } } }])) } },
  };
}


/** The answers every path can give besides its own. */
const entityTag = z.string().meta({ description: 'A strong entity tag of the exact answer: send it back in `If-None-Match` to revalidate.', example: '"k2Qd0m5l3aC7yQ1b9xWv_A"' });

/** The conditional request header every path reads. */
const conditional = z.object({
  'If-None-Match': z.string().optional().meta({
    description: 'The `ETag` of an answer kept: 304 without a body when the answer is unchanged. `*` matches any answer; `W/` prefixes are ignored.',
  }),
});

const common = (extra: Record<string, ZodOpenApiResponseObject> = {}, { revalidated = true } = {}): Record<string, ZodOpenApiResponseObject> => ({
  ...(revalidated ? { '304': notModified } : {}),
  '405': errorResponse('A method other than GET or HEAD (the `Allow` header lists them).', ['METHOD_NOT_ALLOWED']),
  '413': errorResponse('The request is larger than the server accepts.', ['PAYLOAD_TOO_LARGE']),
  '414': errorResponse('The request target is too long.', ['URI_TOO_LONG']),
  '429': errorResponse('Too many requests from this address or with this credential.', ['RATE_LIMITED'], { 'Retry-After': retryAfter }),
  '431': errorResponse('Too many or too large header fields.', ['REQUEST_HEADER_FIELDS_TOO_LARGE']),
  '500': errorResponse('Unexpected: no stack, SQL or internals in the body.', ['INTERNAL_ERROR']),
  '503': errorResponse('The database is unreachable or too slow; try again.', ['SERVICE_UNAVAILABLE']),
  ...extra,
});

const notModified: ZodOpenApiResponseObject = {
  description:
    'Not modified: `If-None-Match` names the answer\'s current `ETag`. No body. On organization details, a 304 is not a retrieval (the details were counted when they were sent).',
  headers: z.object({ 'X-Request-Id': requestId, ETag: entityTag, 'Cache-Control': z.literal('private, no-cache') }),
};

const REVALIDATED_DESCRIPTION = "The caller's own data: browsers may keep it and revalidate every time; shared caches keep nothing.";

const ok = (description: string, schema: z.ZodType, examples: Record<string, unknown>, { secret = false } = {}): ZodOpenApiResponseObject => ({
  description,
  headers: z.object({
    'X-Request-Id': requestId,
    'Cache-Control': secret
      ? z.enum(['private, no-cache', 'no-store']).meta({
          description: `${REVALIDATED_DESCRIPTION} \`no-store\`, with no \`ETag\`, when the answer carries the real signing secret (the parent by JWT): no cache keeps it, a browser's included.`,
        })
      : z.literal('private, no-cache').meta({ description: REVALIDATED_DESCRIPTION }),
    ETag: secret ? entityTag.optional() : entityTag,
  }),
  content: { 'application/json': { schema, examples: Object.fromEntries(Object.entries(examples).map(([name, value]) => [name, { value }])) } },
});

/*
 * Example answers (a test validates each against its schema). One organization throughout: its
 * parent, one child, one purchase.
 */
const PURCHASE = { packageType: 'STARTER', purchaseDate: 1706745600000, creditsAdded: 10000, freeUsersAdded: 1000, price: 10, transactionId: 'TXN_8f2c61d0' };
const ACCOUNT = {
  userID: 'USR_7f3a9c',
  username: 'acme-admin',
  email: 'admin@acme.example.com',
  publicKey: 'APK_7f3a9c_1705312800000',
  parentAccount: 'ROOT',
  accountStatus: 'active',
  emailVerified: true,
  createdAt: 1705312800000,
  updatedAt: 1716200000000,
  lastLogin: 1716200000000,
  organizationName: 'Acme',
  domainRestrictionEnabled: true,
  emailVerificationRequired: false,
  organizationId: null,
  authProvider: 'email',
  lastLoginProvider: 'email',
  providerAId: null,
  childSignupCount: 120,
  signInCount: 3400,
  emailConfirmationCount: 118,
  providerAAuthCount: 40,
  providerBAuthCount: 12,
  providerCAuthCount: 0,
  providerDAuthCount: 3,
  lastPasswordChanged: null,
  loginAttempts: 0,
  lastLoginAttempt: 1716200000000,
  lockedUntil: null,
  lastResetPasswordRequestAt: null,
};
const PROFILE_EXAMPLES = {
  parent: {
    success: true,
    data: {
      message: 'User profile retrieved successfully',
      user: {
        ...ACCOUNT,
        accountType: 'parent',
        organizationUrl: 'https://acme.example.com',
        authUrls: { signin: 'https://acme.example.com/signin', signup: 'https://acme.example.com/signup' },
        creditBalance: 8200,
        totalFreeUsers: 1000,
        billableChildAccounts: 0,
        totalChildAccounts: 120,
        packagesHistory: [PURCHASE],
        accountBalance: 0,
        availableBalance: 0,
        providerASsoConfig: { enabled: false, clientId: '' },
        lastLowCreditNotificationAt: null,
        lastCriticalCreditNotificationAt: null,
        lastDepletedCreditNotificationAt: null,
      },
    },
  },
  child: {
    success: true,
    data: {
      message: 'User profile retrieved successfully',
      user: {
        ...ACCOUNT,
        userID: 'USR_c41d02',
        username: 'jane',
        email: 'jane@example.org',
        parentAccount: 'APK_7f3a9c_1705312800000',
        signInCount: 31,
        childSignupCount: 0,
        emailConfirmationCount: 1,
        accountType: 'child',
        organizationUrl: null,
        authUrls: null,
      },
    },
  },
};
const ORGANIZATION_EXAMPLE = {
  success: true,
  data: {
    message: 'Organization details retrieved successfully',
    organizationName: 'Acme',
    organizationUrl: 'https://acme.example.com',
    authUrls: Object.fromEntries(['signin', 'signup', 'verify', 'reset', 'update', 'resend', 'successful'].map((key) => [key, `https://acme.example.com/${key}`])),
    domainRestrictionEnabled: true,
    emailVerificationRequired: false,
    providerASsoConfig: { enabled: false, clientId: '' },
    credentials: { publicKey: 'APK_7f3a9c_1705312800000', jwtSecret: '********' },
  },
};
const CHILD_PAGE_EXAMPLE = {
  success: true,
  data: {
    data: {
      stats: { total: 120, active: 54 },
      accounts: [
        { username: 'jane', email: 'jane@example.org', lastSeen: '2024-05-20T10:13:20.000Z', registered: '2024-03-02T09:00:00.000Z' },
        { username: 'omar', email: 'omar@example.org', lastSeen: null, registered: '2024-02-27T16:45:10.000Z' },
      ],
      pagination: { limit: 2, hasMore: true, nextPageToken: 'eyJ2IjoxLCJjIjoxNzA5MDUyMzEwMDAwfQ.c2lnbmF0dXJl' },
    },
  },
};
const CREDIT_ANALYSIS_EXAMPLE = {
  creditBalance: 8200,
  totalFreeUsers: 1000,
  totalChildAccounts: 1120,
  billableUsers: 120,
  monthlyRetentionCredits: 120,
  operationUsage: { childSignups: 40, signIns: 900, emailVerifications: 38, socialSignIns: { providerA: 20, providerB: 4, providerC: 0, providerD: 1, total: 25 } },
  totalCreditsUsed: 1251,
  projectedMonthlyUsage: 2061,
  alerts: { low: false, critical: false, depleted: false },
  packageHistory: [PURCHASE],
};

const unauthorized = errorResponse('The token is missing, malformed, expired, badly signed or of another organization.', ['UNAUTHORIZED'], {
  'WWW-Authenticate': z.literal('Bearer'),
});
const parentOnlyUnauthorized = errorResponse(
  'The token is missing or invalid (`UNAUTHORIZED`), or belongs to a child (`UNAUTHORIZED_ACCESS`).',
  ['UNAUTHORIZED', 'UNAUTHORIZED_ACCESS'],
  { 'WWW-Authenticate': z.literal('Bearer') },
);
const forbidden = errorResponse('The account is not usable (`ACCOUNT_INACTIVE`), or it is a child of an organization whose credits are depleted (`CREDITS_DEPLETED`).', [
  'ACCOUNT_INACTIVE',
  'CREDITS_DEPLETED',
]);
const userNotFound = errorResponse("The token's account no longer exists.", ['USER_NOT_FOUND']);
const badRequest = (codes: Code[]) => errorResponse('A header or parameter is invalid.', codes);

const bearer = [{ bearerAuth: [] }];

const operations: Record<string, ZodOpenApiOperationObject> = {
  '/auth/user-profile': {
    operationId: 'getUserProfile',
    summary: "The caller's own profile",
    description: "A parent's carries the organization's credit, billing and SSO fields; a child's does not.",
    security: bearer,
    requestParams: { header: conditional },
    responses: {
      '200': ok('The profile.', UserProfileResponse, PROFILE_EXAMPLES),
      '400': badRequest(['BAD_REQUEST']),
      '401': unauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common(),
    },
  },
  '/auth/organization-details': {
    operationId: 'getOrganizationDetails',
    summary: "The organization's details",
    description:
      'By token (a child gets its parent\'s organization), or by the public key in `X-Public-Key` when no `Authorization` header is sent. When `Authorization` is sent, only the token is tried.',
    security: [{ bearerAuth: [] }, { publicKey: [] }],
    requestParams: { header: conditional },
    responses: {
      '200': ok('The details.', OrganizationDetailsResponse, { publicKeyCaller: ORGANIZATION_EXAMPLE }, { secret: true }),
      '400': badRequest(['MISSING_PARENT_PUBLIC_KEY', 'INVALID_PARENT_ACCOUNT', 'BAD_REQUEST']),
      '401': unauthorized,
      '403': forbidden,
      '404': errorResponse('No account has this public key, or the token\'s account no longer exists.', ['USER_NOT_FOUND']),
      ...common(),
    },
  },
  '/auth/child-accounts': {
    operationId: 'listChildAccounts',
    summary: "A page of the parent's children, with counts",
    description:
      'Newest registration first, ties broken by id. Keyset pagination: a page costs the same at any depth, and rows added or removed between pages never make a row repeat or be skipped. A known parameter given twice is invalid; unknown ones are ignored. Parent accounts only.',
    security: bearer,
    requestParams: {
      header: conditional,
      query: z.object({
        search: z
          .string()
          .max(MAX_SEARCH_LENGTH)
          .optional()
          .meta({ description: `Case-insensitive substring of the username or email, after trimming; empty is no filter. At most ${MAX_SEARCH_LENGTH} characters (\`INVALID_SEARCH\`). \`%\`, \`_\` and \`\\\` match themselves.` }),
        startDate: z.string().optional().meta({
          description:
            'Lower bound of the registration time, inclusive. `YYYY-MM-DD` (the start of that UTC day), an ISO 8601 date-time (UTC unless it has an offset, which is applied), or digits (milliseconds since the epoch). Anything else, an impossible date, or a startDate after endDate: `INVALID_DATE_FORMAT`.',
          examples: ['2024-05-01', '2024-05-01T08:30:00Z', '2024-05-01T10:30:00+02:00', '1714521600000'],
        }),
        endDate: z.string().optional().meta({
          description: 'Upper bound of the registration time, inclusive; the same forms. `YYYY-MM-DD` includes the whole UTC day.',
          example: '2024-05-31',
        }),
        limit: z
          .number()
          .int()
          .min(1)
          .max(MAX_LIMIT)
          .optional()
          .meta({ description: `Rows per page, digits only, 1 to ${MAX_LIMIT}; default ${DEFAULT_LIMIT}. Anything else: \`INVALID_LIMIT\`.`, default: DEFAULT_LIMIT }),
        lastKey: z.string().optional().meta({
          description:
            '`data.data.pagination.nextPageToken` of the previous page, with the same filters. Opaque and bound to the parent it was issued to: altered, malformed or another parent\'s is `INVALID_PAGINATION_TOKEN`.',
        }),
      }),
    },
    responses: {
      '200': ok('The page.', ChildAccountsResponse, { firstPage: CHILD_PAGE_EXAMPLE }),
      '400': badRequest(['INVALID_SEARCH', 'INVALID_DATE_FORMAT', 'INVALID_LIMIT', 'INVALID_PAGINATION_TOKEN', 'BAD_REQUEST']),
      '401': parentOnlyUnauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common(),
    },
  },
  '/parent/credit-analysis': {
    operationId: 'getCreditAnalysis',
    summary: "The parent's credit analysis",
    description: 'Balance, usage this month, billable users, projection, alerts and purchases. Parent accounts only.',
    security: bearer,
    requestParams: { header: conditional },
    responses: {
      '200': ok('The analysis.', CreditAnalysisResponse, { healthy: CREDIT_ANALYSIS_EXAMPLE }),
      '400': badRequest(['BAD_REQUEST']),
      '401': parentOnlyUnauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common(),
    },
  },
  [EXPORT_PATH]: {
    operationId: 'exportChildAccounts',
    summary: "The parent's whole child list as a file (an addition beside the four documented paths)",
    description:
      'Every child matching the filters of `/auth/child-accounts`, newest registration first, streamed as CSV (`username,email,lastSeen,registered`, RFC 4180, a header line, `lastSeen` empty when never; a value starting with `=`, `+`, `-`, `@`, a tab or a carriage return is prefixed with `\'` so spreadsheets keep it text) or NDJSON (one `{ username, email, lastSeen, registered }` a line, as the list items). Read in keyset batches as the client reads: a client that reads nothing for `EXPORT_STALL_MS` is cut off, and an answer that ends early ends without its final chunk, which HTTP clients report as an error. Parent accounts only; one export per organization at a time (`EXPORT_BUSY`); it counts as `EXPORT_RATE_COST` requests against the rate limits.',
    security: bearer,
    requestParams: {
      query: z.object({
        format: z.enum(['csv', 'ndjson']).optional().meta({ description: 'The file format; default `csv`. Anything else, or given twice: `INVALID_FORMAT`.', default: 'csv' }),
        search: z.string().max(MAX_SEARCH_LENGTH).optional().meta({ description: 'As on `/auth/child-accounts`.' }),
        startDate: z.string().optional().meta({ description: 'As on `/auth/child-accounts`.' }),
        endDate: z.string().optional().meta({ description: 'As on `/auth/child-accounts`.' }),
      }),
    },
    responses: {
      '200': {
        description: 'The file, chunked; `Content-Disposition: attachment`, `Cache-Control: no-store`.',
        headers: z.object({ 'X-Request-Id': requestId, 'Content-Disposition': z.string().meta({ example: 'attachment; filename="child-accounts-2026-11-24.csv"' }) }),
        content: {
          'text/csv': { schema: z.string(), examples: { csv: { value: 'username,email,lastSeen,registered\r\nalice,alice@example.com,2024-05-20T10:13:20.000Z,2024-01-15T09:00:00.000Z\r\n' } } },
          'application/x-ndjson': { schema: z.string(), examples: { ndjson: { value: '{"username":"alice","email":"alice@example.com","lastSeen":"2024-05-20T10:13:20.000Z","registered":"2024-01-15T09:00:00.000Z"}\n' } } },
        },
      },
      '400': badRequest(['INVALID_FORMAT', 'INVALID_SEARCH', 'INVALID_DATE_FORMAT', 'BAD_REQUEST']),
      '401': parentOnlyUnauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common(
        { '429': errorResponse('Too many requests (an export counts as `EXPORT_RATE_COST`), or an export of this organization is already running.', ['RATE_LIMITED', 'EXPORT_BUSY'], { 'Retry-After': retryAfter }) },
        { revalidated: false },
      ),
    },
  },
};

/** The document, built once. */
let built: Record<string, unknown> | undefined;

export function openApiDocument(): Record<string, unknown> {
  built ??= createDocument({
    openapi: '3.1.0',
    info: {
      title: 'Credits read API (REST)',
      version: '1.0.0',
      description:
        'The four GET paths of the credits read API, with their JSON envelopes, and beside them the child-list export (an addition: CSV or NDJSON). Each also answers HEAD with the same headers. The same data, selectively, is at `/graphql` (see `schema.graphql`).',
    },
    servers: [{ url: '/' }],
    paths: Object.fromEntries(Object.entries(operations).map(([path, get]) => [path, { get }])),
    components: {
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            "HS256, signed with the organization's signing secret; header `kid` = the organization's public key, `sub` = the userID, `exp` required. `npm run token -- <email or userID>` mints one in development.",
        },
        publicKey: {
          type: 'apiKey',
          in: 'header',
          name: 'X-Public-Key',
          description: "The organization's public key (`APK_<id>_<digits>`), for organization details only.",
        },
      },
    },
  }) as unknown as Record<string, unknown>;
  return built;
}
