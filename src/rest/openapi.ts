import { z } from 'zod';
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiResponseObject } from 'zod-openapi';
import { DEFAULT_LIMIT, MAX_LIMIT, MAX_SEARCH_LENGTH } from '../services/list-child-accounts.js';
import { EXPORT_PATH } from './export.js';
import {
  ChildAccountsResponse,
  CreditAnalysisResponse,
  ErrorResponse,
  OrganizationDetailsResponse,
  UserProfileResponse,
  type Code,
} from './openapi-schemas.js';
import {
  CHILD_PAGE_EXAMPLE,
  CREDIT_ANALYSIS_EXAMPLE,
  ORGANIZATION_EXAMPLE,
  PROFILE_EXAMPLES,
} from './openapi-examples.js';

/**
 * The OpenAPI 3.1 description of the four REST paths and the child-list export beside them, built from zod schemas
 * (the bodies and error codes in openapi-schemas.ts, the examples in openapi-examples.ts): here,
 * the headers, the answers every path shares and each path's operation. A test validates
 * the document and every answer the REST tests receive against it, so it cannot drift from the
 * code. Served at /openapi.json, and read by the reference page at /docs.
 */

const requestId = z.string().meta({
  description: 'The request id: the sent `X-Request-Id` when it is sane, a new UUID otherwise. It is in the log line.',
});
const retryAfter = z.string().meta({ description: 'Seconds to wait before trying again.' });

function errorResponse(
  description: string,
  codes: Code[],
  headers?: Record<string, z.ZodType>,
): ZodOpenApiResponseObject {
  const schema = ErrorResponse.extend({
    error: z.strictObject({ code: z.enum(codes as [Code, ...Code[]]), message: z.string() }),
  });
  return {
    description: `${description} Codes: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    headers: z.object({ 'X-Request-Id': requestId, ...headers }),
    content: {
      'application/json': {
        schema,
        examples: Object.fromEntries(
          codes.map((code) => [code, { value: { success: false, error: { code, message: '…' } } }]),
        ),
      },
    },
  };
}

/** The answers every path can give besides its own. */
const entityTag = z.string().meta({
  description: 'A strong entity tag of the exact answer: send it back in `If-None-Match` to revalidate.',
  example: '"k2Qd0m5l3aC7yQ1b9xWv_A"',
});

/** The conditional request header every path reads. */
const conditional = z.object({
  'If-None-Match': z.string().optional().meta({
    description:
      'The `ETag` of an answer kept: 304 without a body when the answer is unchanged. `*` matches any answer; `W/` prefixes are ignored.',
  }),
});

const common = (
  extra: Record<string, ZodOpenApiResponseObject> = {},
  { revalidated = true } = {},
): Record<string, ZodOpenApiResponseObject> => ({
  ...(revalidated ? { '304': notModified } : {}),
  '405': errorResponse('A method other than GET or HEAD (the `Allow` header lists them).', ['METHOD_NOT_ALLOWED']),
  '413': errorResponse('The request is larger than the server accepts.', ['PAYLOAD_TOO_LARGE']),
  '414': errorResponse('The request target is too long.', ['URI_TOO_LONG']),
  '429': errorResponse(
    "Too many requests from this address or with this credential: in the rate limit's window, or in progress at once.",
    ['RATE_LIMITED'],
    { 'Retry-After': retryAfter },
  ),
  '431': errorResponse('Too many or too large header fields.', ['REQUEST_HEADER_FIELDS_TOO_LARGE']),
  '500': errorResponse('Unexpected: no stack, SQL or internals in the body.', ['INTERNAL_ERROR']),
  '503': errorResponse('The database is unreachable or too slow; try again.', ['SERVICE_UNAVAILABLE']),
  ...extra,
});

const notModified: ZodOpenApiResponseObject = {
  description:
    "Not modified: `If-None-Match` names the answer's current `ETag`. No body. On organization details, a 304 counts as a retrieval, as a 200 does.",
  headers: z.object({ 'X-Request-Id': requestId, ETag: entityTag, 'Cache-Control': z.literal('private, no-cache') }),
};

const REVALIDATED_DESCRIPTION =
  "The caller's own data: browsers may keep it and revalidate every time; shared caches keep nothing.";

const ok = (
  description: string,
  schema: z.ZodType,
  examples: Record<string, unknown>,
  { secret = false } = {},
): ZodOpenApiResponseObject => ({
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
  content: {
    'application/json': {
      schema,
      examples: Object.fromEntries(Object.entries(examples).map(([name, value]) => [name, { value }])),
    },
  },
});

const unauthorized = errorResponse(
  'The token is missing, malformed, expired, badly signed or of another organization.',
  ['UNAUTHORIZED'],
  {
    'WWW-Authenticate': z.literal('Bearer'),
  },
);
const parentOnlyUnauthorized = errorResponse(
  'The token is missing or invalid (`UNAUTHORIZED`), or belongs to a child (`UNAUTHORIZED_ACCESS`).',
  ['UNAUTHORIZED', 'UNAUTHORIZED_ACCESS'],
  { 'WWW-Authenticate': z.literal('Bearer') },
);
const forbidden = errorResponse(
  'The account is not usable (`ACCOUNT_INACTIVE`), or it is a child of an organization whose credits are depleted (`CREDITS_DEPLETED`).',
  ['ACCOUNT_INACTIVE', 'CREDITS_DEPLETED'],
);
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
      "By token (a child gets its parent's organization), or by the public key in `X-Public-Key` when no `Authorization` header is sent. When `Authorization` is sent, only the token is tried.",
    security: [{ bearerAuth: [] }, { publicKey: [] }],
    requestParams: { header: conditional },
    responses: {
      '200': ok(
        'The details.',
        OrganizationDetailsResponse,
        { publicKeyCaller: ORGANIZATION_EXAMPLE },
        { secret: true },
      ),
      '400': badRequest(['MISSING_PARENT_PUBLIC_KEY', 'INVALID_PARENT_ACCOUNT', 'BAD_REQUEST']),
      '401': unauthorized,
      '403': forbidden,
      '404': errorResponse("No account has this public key, or the token's account no longer exists.", [
        'USER_NOT_FOUND',
      ]),
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
          .meta({
            description: `Case-insensitive substring of the username or email, after trimming; empty is no filter. At most ${MAX_SEARCH_LENGTH} characters (\`INVALID_SEARCH\`). \`%\`, \`_\` and \`\\\` match themselves.`,
          }),
        startDate: z
          .string()
          .optional()
          .meta({
            description:
              'Lower bound of the registration time, inclusive. `YYYY-MM-DD` (the start of that UTC day), an ISO 8601 date-time (UTC unless it has an offset, which is applied), or digits (milliseconds since the epoch). Anything else, an impossible date, or a startDate after endDate: `INVALID_DATE_FORMAT`.',
            examples: ['2024-05-01', '2024-05-01T08:30:00Z', '2024-05-01T10:30:00+02:00', '1714521600000'],
          }),
        endDate: z.string().optional().meta({
          description:
            'Upper bound of the registration time, inclusive; the same forms. `YYYY-MM-DD` includes the whole UTC day.',
          example: '2024-05-31',
        }),
        limit: z
          .number()
          .int()
          .min(1)
          .max(MAX_LIMIT)
          .optional()
          .meta({
            description: `Rows per page, digits only, 1 to ${MAX_LIMIT}; default ${DEFAULT_LIMIT}. Anything else: \`INVALID_LIMIT\`.`,
            default: DEFAULT_LIMIT,
          }),
        lastKey: z.string().optional().meta({
          description:
            "`data.data.pagination.nextPageToken` of the previous page, with the same filters. Opaque and bound to the parent it was issued to: altered, malformed or another parent's is `INVALID_PAGINATION_TOKEN`.",
        }),
      }),
    },
    responses: {
      '200': ok('The page.', ChildAccountsResponse, { firstPage: CHILD_PAGE_EXAMPLE }),
      '400': badRequest([
        'INVALID_SEARCH',
        'INVALID_DATE_FORMAT',
        'INVALID_LIMIT',
        'INVALID_PAGINATION_TOKEN',
        'BAD_REQUEST',
      ]),
      '401': parentOnlyUnauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common({
        '429': errorResponse(
          "Too many requests from this address or with this credential; or, with `search`, this organization runs as many searches at once as the server allows one organization (`SEARCH_MAX_PER_ORGANIZATION`), or its searches have taken their part of the server's search time, which the organizations searching share equally (`SEARCH_BUSY`).",
          ['RATE_LIMITED', 'SEARCH_BUSY'],
          { 'Retry-After': retryAfter },
        ),
        '503': errorResponse(
          "The database is unreachable or too slow; or, with `search`, the search ran past `SEARCH_TIMEOUT_MS`, or the server's search slots are taken by several organizations together. With `Retry-After` for the search's refusals.",
          ['SERVICE_UNAVAILABLE'],
          { 'Retry-After': retryAfter },
        ),
      }),
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
      "Every child matching the filters of `/auth/child-accounts`, newest registration first, streamed as CSV (`username,email,lastSeen,registered`, RFC 4180, a header line, `lastSeen` empty when never; a value starting with `=`, `+`, `-`, `@`, a tab or a carriage return is prefixed with `'` so spreadsheets keep it text) or NDJSON (one `{ username, email, lastSeen, registered }` a line, as the list items). Read in keyset batches as the client reads: a client that reads nothing for `EXPORT_STALL_MS` is cut off, and an answer that ends early ends without its final chunk, which HTTP clients report as an error. Parent accounts only; one export per organization at a time (`EXPORT_BUSY`); it counts as `EXPORT_RATE_COST` requests against the rate limits.",
    security: bearer,
    requestParams: {
      query: z.object({
        format: z.enum(['csv', 'ndjson']).optional().meta({
          description: 'The file format; default `csv`. Anything else, or given twice: `INVALID_FORMAT`.',
          default: 'csv',
        }),
        search: z.string().max(MAX_SEARCH_LENGTH).optional().meta({ description: 'As on `/auth/child-accounts`.' }),
        startDate: z.string().optional().meta({ description: 'As on `/auth/child-accounts`.' }),
        endDate: z.string().optional().meta({ description: 'As on `/auth/child-accounts`.' }),
      }),
    },
    responses: {
      '200': {
        description: 'The file, chunked; `Content-Disposition: attachment`, `Cache-Control: no-store`.',
        headers: z.object({
          'X-Request-Id': requestId,
          'Content-Disposition': z.string().meta({ example: 'attachment; filename="child-accounts-2026-11-24.csv"' }),
        }),
        content: {
          'text/csv': {
            schema: z.string(),
            examples: {
              csv: {
                value:
                  'username,email,lastSeen,registered\r\nalice,alice@example.com,2024-05-20T10:13:20.000Z,2024-01-15T09:00:00.000Z\r\n',
              },
            },
          },
          'application/x-ndjson': {
            schema: z.string(),
            examples: {
              ndjson: {
                value:
                  '{"username":"alice","email":"alice@example.com","lastSeen":"2024-05-20T10:13:20.000Z","registered":"2024-01-15T09:00:00.000Z"}\n',
              },
            },
          },
        },
      },
      '400': badRequest(['INVALID_FORMAT', 'INVALID_SEARCH', 'INVALID_DATE_FORMAT', 'BAD_REQUEST']),
      '401': parentOnlyUnauthorized,
      '403': forbidden,
      '404': userNotFound,
      ...common(
        {
          '429': errorResponse(
            'Too many requests (an export counts as `EXPORT_RATE_COST`), or an export of this organization is already running.',
            ['RATE_LIMITED', 'EXPORT_BUSY'],
            { 'Retry-After': retryAfter },
          ),
        },
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
