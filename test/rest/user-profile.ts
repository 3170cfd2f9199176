import { Agent, request } from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Account } from '../../src/generated/prisma/client.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from '../helpers/builders.js';
import { expectError, rest, useServer } from '../helpers/app.js';
import { testMode, useSharedDatabase } from '../helpers/database.js';

/** The spec's User table: field, type (null allowed where the spec says so). */
const USER_FIELDS: [string, string][] = [
  ['userID', 'string'],
  ['username', 'string'],
  ['email', 'string'],
  ['publicKey', 'string'],
  ['accountType', 'string'],
  ['parentAccount', 'string'],
  ['accountStatus', 'string'],
  ['emailVerified', 'boolean'],
  ['createdAt', 'integer'],
  ['updatedAt', 'integer'],
  ['lastLogin', 'integer|null'],
  ['organizationName', 'string'],
  ['organizationUrl', 'string|null'],
  ['authUrls', 'object|null'],
  ['domainRestrictionEnabled', 'boolean'],
  ['emailVerificationRequired', 'boolean'],
  ['organizationId', 'null'],
  ['authProvider', 'string'],
  ['lastLoginProvider', 'string|null'],
  ['providerAId', 'string|null'],
  ['childSignupCount', 'integer'],
  ['signInCount', 'integer'],
  ['emailConfirmationCount', 'integer'],
  ['providerAAuthCount', 'integer'],
  ['providerBAuthCount', 'integer'],
  ['providerCAuthCount', 'integer'],
  ['providerDAuthCount', 'integer'],
  ['lastPasswordChanged', 'integer|null'],
  ['loginAttempts', 'integer'],
  ['lastLoginAttempt', 'integer|null'],
  ['lockedUntil', 'integer|null'],
  ['lastResetPasswordRequestAt', 'integer|null'],
];
const PARENT_FIELDS: [string, string][] = [
  ['creditBalance', 'integer'],
  ['totalFreeUsers', 'integer'],
  ['billableChildAccounts', 'integer'],
  ['totalChildAccounts', 'integer'],
  ['packagesHistory', 'array'],
  ['accountBalance', 'number'],
  ['availableBalance', 'number'],
  ['providerASsoConfig', 'object'],
  ['lastLowCreditNotificationAt', 'integer|null'],
  ['lastCriticalCreditNotificationAt', 'integer|null'],
  ['lastDepletedCreditNotificationAt', 'integer|null'],
];

export function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function expectType(value: unknown, spec: string, field: string) {
  const allowed = spec.split('|').flatMap((t) => (t === 'number' ? ['number', 'integer'] : [t]));
  expect(allowed, `${field} is ${typeOf(value)}`).toContain(typeOf(value));
}

describe(`GET /auth/user-profile (${testMode})`, () => {
  const database = useSharedDatabase();
  const server = useServer(database);
  let org: BuiltOrganization;
  let child: Account;

  beforeAll(async () => {
    org = await createOrganization(database(), {
      parent: { lastLogin: new Date('2026-01-01T00:00:00.000Z') },
      organization: {
        accountBalance: '10.50',
        availableBalance: '3.25',
        lastCriticalCreditNotificationAt: new Date('2026-02-02T00:00:00.000Z'),
      },
    });
    child = await createChild(database(), org.parent, { lastLogin: new Date('2026-03-03T00:00:00.000Z') });
  });

  it('a parent: the envelope, every field of both tables with its type, parent values', async () => {
    const result = await rest(server(), '/auth/user-profile', { token: await tokenFor(org.parent, org) });
    expect(result.status).toBe(200);
    expect(result.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(result.headers.get('cache-control')).toBe('private, no-cache');
    expect(Object.keys(result.body)).toEqual(['success', 'data']);
    expect(result.body.success).toBe(true);
    expect(Object.keys(result.body.data)).toEqual(['message', 'user']);
    expect(typeof result.body.data.message).toBe('string');
    const user = result.body.data.user;
    expect(Object.keys(user)).toEqual([...USER_FIELDS, ...PARENT_FIELDS].map(([f]) => f));
    for (const [field, type] of [...USER_FIELDS, ...PARENT_FIELDS]) expectType(user[field], type, field);
    expect(user).toMatchObject({
      userID: org.parent.id,
      accountType: 'parent',
      parentAccount: 'ROOT',
      createdAt: org.parent.createdAt.getTime(),
      lastLogin: Date.parse('2026-01-01T00:00:00.000Z'),
      organizationUrl: org.organization.url,
      authUrls: { signin: org.organization.signinUrl, signup: org.organization.signupUrl },
      organizationId: null,
      accountBalance: 10.5,
      availableBalance: 3.25,
      totalChildAccounts: 1,
      lastCriticalCreditNotificationAt: Date.parse('2026-02-02T00:00:00.000Z'),
      providerASsoConfig: { enabled: false, clientId: '' },
    });
    expect(user.packagesHistory).toHaveLength(1);
    expect(Object.keys(user.packagesHistory[0])).toEqual([
      'packageType',
      'purchaseDate',
      'creditsAdded',
      'freeUsersAdded',
      'price',
      'transactionId',
    ]);
    expect(typeOf(user.packagesHistory[0].purchaseDate)).toBe('integer');
  });

  it("a child: no parent-only field, organizationUrl and authUrls null, its parent's key", async () => {
    const result = await rest(server(), '/auth/user-profile', { token: await tokenFor(child, org) });
    expect(result.status).toBe(200);
    const user = result.body.data.user;
    expect(Object.keys(user)).toEqual(USER_FIELDS.map(([f]) => f));
    for (const [field, type] of USER_FIELDS) expectType(user[field], type, field);
    expect(user).toMatchObject({
      accountType: 'child',
      parentAccount: org.parent.publicKey,
      organizationUrl: null,
      authUrls: null,
      lastLogin: Date.parse('2026-03-03T00:00:00.000Z'),
    });
  });

  it.each([
    ['no token', {}, 401, 'UNAUTHORIZED'],
    ['a malformed token', { token: 'abc' }, 401, 'UNAUTHORIZED'],
  ])('%s: %i %s with WWW-Authenticate', async (_name, options, status, code) => {
    const result = await rest(server(), '/auth/user-profile', options);
    expectError(result, status, code);
    expect(result.headers.get('www-authenticate')).toBe('Bearer');
  });

  it('an inactive account: 403 ACCOUNT_INACTIVE; a deleted one: 404 USER_NOT_FOUND; a depleted child: 403 CREDITS_DEPLETED', async () => {
    const inactive = await createChild(database(), org.parent, { status: 'inactive' });
    expectError(
      await rest(server(), '/auth/user-profile', { token: await tokenFor(inactive, org) }),
      403,
      'ACCOUNT_INACTIVE',
    );
    const gone = await createChild(database(), org.parent);
    const token = await tokenFor(gone, org);
    await database().prisma.account.delete({ where: { id: gone.id } });
    expectError(await rest(server(), '/auth/user-profile', { token }), 404, 'USER_NOT_FOUND');
    const depleted = await createOrganization(database(), { organization: { creditBalance: -3 } });
    const poorChild = await createChild(database(), depleted.parent);
    expectError(
      await rest(server(), '/auth/user-profile', { token: await tokenFor(poorChild, depleted) }),
      403,
      'CREDITS_DEPLETED',
    );
    expect(
      (await rest(server(), '/auth/user-profile', { token: await tokenFor(depleted.parent, depleted) })).status,
    ).toBe(200);
  });

  it('one connection sending several tokens in turn is answered for each token as sent', async () => {
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    const ask = (token: string) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const sent = request(
          `${server().url}/auth/user-profile`,
          { agent, headers: { authorization: `Bearer ${token}` } },
          (response) => {
            sockets.add(response.socket);
            let text = '';
            response.setEncoding('utf8');
            response.on('data', (chunk: string) => (text += chunk));
            response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) }));
          },
        );
        sent.on('error', reject);
        sent.end();
      });
    try {
      // An altered token after a valid one: the same text but its last character.
      const altered = childToken.slice(0, -1) + (childToken.endsWith('A') ? 'B' : 'A');
      for (const [token, expected] of [
        [parentToken, org.parent.id],
        [childToken, child.id],
        [childToken, child.id],
        [parentToken, org.parent.id],
        [altered, undefined],
        [childToken, child.id],
      ] as const) {
        const answer = await ask(token);
        if (expected === undefined) expect(answer.status).toBe(401);
        else expect(answer.body.data.user.userID).toBe(expected);
      }
      expect(sockets.size).toBe(1);
    } finally {
      agent.destroy();
    }
  });

  it('a public key alone is not enough: 401 UNAUTHORIZED', async () => {
    expectError(await rest(server(), '/auth/user-profile', { publicKey: org.parent.publicKey }), 401, 'UNAUTHORIZED');
  });
});
