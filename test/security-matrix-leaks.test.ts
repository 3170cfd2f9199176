import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { SECRET_MARKER, seed } from '../src/dev/demo-data.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const FORBIDDEN_FIELDS = [
  'passwordHash',
  'password',
  'emailVerificationToken',
  'passwordResetToken',
  'encryptionKey',
  'encryptionIv',
  'providerASsoClientSecret',
  'clientSecret',
  'detailsRetrievalCount',
  'stack',
  'sql',
  'parentId',
];

type Caller = { name: string; headers: () => Record<string, string> };

describe(`authorization matrix, leak scan and fuzzing (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const callers: Caller[] = [];
  let org: BuiltOrganization;
  let secrets: string[] = [];
  /** Each organization's signing secret, and the parent's id that may see it. */
  let signingSecrets: string[] = [];

  beforeAll(async () => {
    org = await createOrganization(database());
    const child = await createChild(database(), org.parent, {
      passwordHash: `${SECRET_MARKER}_PASSWORD_HASH_child`,
      passwordResetToken: `${SECRET_MARKER}_RESET_child`,
    });
    const inactive = await createOrganization(database(), { parent: { status: 'inactive' } });
    const locked = await createOrganization(database(), {
      parent: { status: 'locked', lockedUntil: new Date(Date.now() + 3_600_000) },
    });
    const unlocked = await createOrganization(database(), {
      parent: { status: 'locked', lockedUntil: new Date(Date.now() - 1000) },
    });
    const other = await createOrganization(database());
    const depleted = await createOrganization(database(), { organization: { creditBalance: 0 } });
    const depletedChild = await createChild(database(), depleted.parent);
    const bearer = async (account: { id: string }, built: BuiltOrganization) => {
      const token = await tokenFor(account, built);
      return () => ({ authorization: `Bearer ${token}` });
    };
    callers.push(
      { name: 'no credentials', headers: () => ({}) },
      { name: 'public key', headers: () => ({ 'x-public-key': org.parent.publicKey }) },
      { name: 'child', headers: await bearer(child, org) },
      { name: 'parent', headers: await bearer(org.parent, org) },
      { name: 'inactive parent', headers: await bearer(inactive.parent, inactive) },
      { name: 'locked parent', headers: await bearer(locked.parent, locked) },
      { name: 'lock-expired parent', headers: await bearer(unlocked.parent, unlocked) },
      { name: "other organization's parent", headers: await bearer(other.parent, other) },
      { name: "depleted organization's child", headers: await bearer(depletedChild, depleted) },
    );
    await seed(database(), { organizations: 2, childrenPerOrganization: 5, seed: 5, now: new Date() });
    const rows = await database().prisma.organization.findMany();
    const accounts = await database().prisma.account.findMany();
    secrets = [
      ...rows.flatMap((o) => [o.providerASsoClientSecret, o.encryptionKey, o.encryptionIv]),
      ...accounts.flatMap((a) => [a.passwordHash, a.emailVerificationToken, a.passwordResetToken]),
    ].filter((s): s is string => Boolean(s));
    signingSecrets = rows.map((o) => o.jwtSecret);
  });

  const OK = 'OK';
  // rows: callers in the order above; columns: the four REST paths then the four GraphQL fields.
  const columns = [
    '/auth/user-profile',
    '/auth/organization-details',
    '/auth/child-accounts',
    '/parent/credit-analysis',
    'me',
    'organization',
    'childAccounts',
    'creditAnalysis',
  ] as const;
  const expected: Record<string, string[]> = {
    'no credentials': [
      '401 UNAUTHORIZED',
      '400 MISSING_PARENT_PUBLIC_KEY',
      '401 UNAUTHORIZED',
      '401 UNAUTHORIZED',
      'UNAUTHORIZED',
      'MISSING_PARENT_PUBLIC_KEY',
      'UNAUTHORIZED',
      'UNAUTHORIZED',
    ],
    'public key': [
      '401 UNAUTHORIZED',
      OK,
      '401 UNAUTHORIZED',
      '401 UNAUTHORIZED',
      'UNAUTHORIZED',
      OK,
      'UNAUTHORIZED',
      'UNAUTHORIZED',
    ],
    child: [
      OK,
      OK,
      '401 UNAUTHORIZED_ACCESS',
      '401 UNAUTHORIZED_ACCESS',
      OK,
      OK,
      'UNAUTHORIZED_ACCESS',
      'UNAUTHORIZED_ACCESS',
    ],
    parent: [OK, OK, OK, OK, OK, OK, OK, OK],
    'inactive parent': [
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
    ],
    'locked parent': [
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      '403 ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
      'ACCOUNT_INACTIVE',
    ],
    'lock-expired parent': [OK, OK, OK, OK, OK, OK, OK, OK],
    "other organization's parent": [OK, OK, OK, OK, OK, OK, OK, OK],
    "depleted organization's child": [
      '403 CREDITS_DEPLETED',
      '403 CREDITS_DEPLETED',
      '403 CREDITS_DEPLETED',
      '403 CREDITS_DEPLETED',
      'CREDITS_DEPLETED',
      'CREDITS_DEPLETED',
      'CREDITS_DEPLETED',
      'CREDITS_DEPLETED',
    ],
  };
  const FIELDS: Record<string, string> = {
    me: '{ me { userID accountType } }',
    organization: '{ organization { organizationName credentials { publicKey jwtSecret } } }',
    childAccounts: '{ childAccounts(limit: 2) { edges { node { username } } stats { total } } }',
    creditAnalysis: '{ creditAnalysis { creditBalance alerts { low } } }',
  };

  async function ask(caller: Caller, column: (typeof columns)[number]) {
    if (column.startsWith('/')) {
      const r = await rest(server(), column, { headers: caller.headers() });
      return { outcome: r.status === 200 ? OK : `${r.status} ${r.body?.error?.code}`, body: r.text };
    }
    const response = await fetch(`${server().url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...caller.headers() },
      body: JSON.stringify({ query: FIELDS[column] }),
    });
    const text = await response.text();
    const parsed = JSON.parse(text);
    return { outcome: parsed.errors ? parsed.errors[0].extensions.code : OK, body: text };
  }

  it('every caller on every REST path and GraphQL field gets exactly the expected outcome', async () => {
    const actual: Record<string, string[]> = {};
    for (const caller of callers) {
      actual[caller.name] = [];
      for (const column of columns) actual[caller.name]!.push((await ask(caller, column)).outcome);
    }
    expect(actual).toEqual(expected);
  });

  it('no body, success or error, of any role or transport contains a forbidden field or a seeded secret', async () => {
    const hits: string[] = [];
    // The signing secret is the organization's own, shown to its parent by JWT on the organization
    // details (decisions §3) and nowhere else: any other place it shows, in any string, is a leak.
    const mayShowSigningSecret = (caller: string, column: string) =>
      ['parent', 'lock-expired parent', "other organization's parent"].includes(caller) &&
      ['/auth/organization-details', 'organization'].includes(column);
    const scan = (where: string, value: unknown, mayShow: boolean) => {
      if (Array.isArray(value)) return value.forEach((v) => scan(where, v, mayShow));
      if (value && typeof value === 'object') {
        for (const [key, inner] of Object.entries(value)) {
          if (FORBIDDEN_FIELDS.includes(key)) hits.push(`${where}: field ${key}`);
          scan(`${where}.${key}`, inner, mayShow);
        }
      } else if (typeof value === 'string') {
        // Only as the credentials' signing secret itself.
        const signingSecretAllowed = mayShow && where.endsWith('.credentials.jwtSecret');
        if (value.includes(SECRET_MARKER) && !signingSecretAllowed)
          hits.push(`${where}: marker in ${value.slice(0, 40)}`);
        for (const secret of secrets) if (value.includes(secret)) hits.push(`${where}: a secret's value`);
        if (!signingSecretAllowed)
          for (const secret of signingSecrets) if (value.includes(secret)) hits.push(`${where}: a signing secret`);
        if (/\bat .*\.(ts|js):\d+|SELECT |INSERT |prisma/i.test(value))
          hits.push(`${where}: internals in ${value.slice(0, 60)}`);
      }
    };
    /** Anywhere in the body: the object walk decides where the signing secret may be. */
    const scanBody = (where: string, body: string, mayShow: boolean) => {
      scan(where, JSON.parse(body), mayShow);
      if (!mayShow)
        for (const secret of signingSecrets)
          if (body.includes(secret)) hits.push(`${where}: a signing secret in the bytes`);
    };
    let scanned = 0;
    for (const caller of callers) {
      for (const column of columns) {
        const { body } = await ask(caller, column);
        scanBody(`${caller.name} ${column}`, body, mayShowSigningSecret(caller.name, column));
        scanned++;
      }
    }
    // The parent's profile and child list, the GraphQL dashboard, and error answers: never a secret.
    const parent = callers.find((c) => c.name === 'parent')!;
    for (const path of [
      '/auth/user-profile',
      '/auth/child-accounts?limit=100',
      '/auth/child-accounts?search=%25',
      '/auth/child-accounts?limit=abc',
    ]) {
      const r = await rest(server(), path, { headers: parent.headers() });
      scanBody(`parent ${path}`, r.text, false);
    }
    for (const query of [
      '{ me { userID ... on ParentAccount { packagesHistory { transactionId } } } childAccounts(limit: 100) { edges { node { username email } } } creditAnalysis { creditBalance } }',
      '{ me { nope } }',
      '{ childAccounts(limit: 1000) { stats { total } } }',
    ]) {
      const response = await fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...parent.headers() },
        body: JSON.stringify({ query }),
      });
      scanBody(`parent GraphQL ${query.slice(0, 30)}`, await response.text(), false);
    }
    const unknown = await rest(server(), '/nope');
    scanBody('404', unknown.text, false);
    expect(scanned).toBe(72);
    expect(hits).toEqual([]);
  });

  it('the signing secret appears only for the parent itself by JWT', async () => {
    for (const caller of callers) {
      const r = await rest(server(), '/auth/organization-details', { headers: caller.headers() });
      const hasSecret = r.text.includes('JWT_SIGNING_SECRET');
      expect(hasSecret, caller.name).toBe(
        ['parent', 'lock-expired parent', "other organization's parent"].includes(caller.name),
      );
    }
  });

  it('fuzzed query parameters and headers never get a 5xx and always get the envelope', async () => {
    const parent = callers.find((c) => c.name === 'parent')!;
    const value = fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.integer().map(String),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.constantFrom(
        '',
        '%',
        '%%',
        '%FF',
        '%00',
        '\\',
        '_',
        '2024-02-30',
        '101',
        '0',
        'null',
        'undefined',
        '[]',
        '{}',
      ),
    );
    const name = fc.constantFrom('limit', 'search', 'startDate', 'endDate', 'lastKey', 'other', 'limit[]');
    let runs = 0;
    let answered = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(name, value), { maxLength: 4 }),
        fc.constantFrom(...columns.filter((c) => c.startsWith('/'))),
        fc.option(fc.string({ unit: 'grapheme-ascii', maxLength: 60 }), { nil: undefined }),
        fc.option(fc.string({ unit: 'grapheme-ascii', maxLength: 60 }), { nil: undefined }),
        async (pairs, path, authorization, publicKey) => {
          runs++;
          const query = pairs
            .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v).replace(/%25(FF|00)/g, '%$1')}`)
            .join('&');
          const headers: Record<string, string> = authorization === undefined ? parent.headers() : { authorization };
          if (publicKey !== undefined) headers['x-public-key'] = publicKey;
          // fetch refuses some header values itself; those never reach the server, and are not sent.
          try {
            new Headers(headers);
          } catch {
            return;
          }
          // Anything else that fails, a dropped or reset connection included, fails the test.
          const r = await rest(server(), `${path}?${query}`, { headers });
          answered++;
          expect(r.status).toBeLessThan(500);
          if (r.status !== 200) {
            expect(r.body.success).toBe(false);
            expect(Object.keys(r.body.error).sort()).toEqual(['code', 'message']);
          }
        },
      ),
      { seed: 20261122, numRuns: 2500 },
    );
    expect(runs).toBe(2500);
    // Most inputs are sendable: the count is of answers, not attempts.
    expect(answered).toBeGreaterThan(2000);
  });
});
