import { describe, expect, it } from 'vitest';
import { operationId, STORED_OPERATIONS } from '../src/graphql/operations.js';
import { noneMatch } from '../src/exchange.js';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { rest, useServer, type TestServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const PATHS = [
  '/auth/user-profile',
  '/auth/organization-details',
  '/auth/child-accounts?limit=5',
  '/parent/credit-analysis',
];
const STRONG_TAG = /^"[A-Za-z0-9_-]{22}"$/;

describe(`HTTP caching (${testMode})`, () => {
  const database = useTestDatabase();
  const lean = useServer(database);
  const full = useServer(database, { graphqlTransport: 'full' });
  const withOrigins = useServer(database, { env: { CORS_ORIGINS: 'https://app.example' } });

  const retrievals = async (server: TestServer, parentId: string) => {
    await server.app.deps.retrievals.flush();
    return (await database().prisma.organization.findUniqueOrThrow({ where: { parentId } })).detailsRetrievalCount;
  };

  it('REST answers carry a strong ETag and private, no-cache; If-None-Match gets 304 without a body', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    // The organization details as the child sees them (the secret masked); the parent's are below.
    for (const path of PATHS) {
      const token = path === '/auth/organization-details' ? childToken : parentToken;
      const first = await rest(lean(), path, { token });
      expect(first.status, path).toBe(200);
      const tag = first.headers.get('etag')!;
      expect(tag, path).toMatch(STRONG_TAG);
      expect(first.headers.get('cache-control'), path).toBe('private, no-cache');
      expect(first.headers.get('vary'), path).toContain('Authorization');
      // The same answer, the same tag.
      expect((await rest(lean(), path, { token })).headers.get('etag'), path).toBe(tag);
      for (const ifNoneMatch of [tag, `W/${tag}`, `"other", ${tag}`, '*']) {
        const again = await rest(lean(), path, { token, headers: { 'if-none-match': ifNoneMatch } });
        expect(again.status, `${path} ${ifNoneMatch}`).toBe(304);
        expect(again.text).toBe('');
        expect(again.headers.get('etag')).toBe(tag);
        expect(again.headers.get('cache-control')).toBe('private, no-cache');
        expect(again.headers.get('content-length')).toBeNull();
      }
      const head = await rest(lean(), path, { token, method: 'HEAD', headers: { 'if-none-match': tag } });
      expect(head.status, path).toBe(304);
      const stale = await rest(lean(), path, { token, headers: { 'if-none-match': '"stale"' } });
      expect(stale.status, path).toBe(200);
      expect(stale.body, path).toEqual(first.body);
      // A browser's request: the CORS headers beside the revalidation's, `Vary` naming each once.
      for (const ifNoneMatch of [undefined, tag]) {
        const cors = await rest(withOrigins(), path, {
          token,
          headers: { origin: 'https://app.example', ...(ifNoneMatch ? { 'if-none-match': ifNoneMatch } : {}) },
        });
        expect(cors.status, path).toBe(ifNoneMatch ? 304 : 200);
        expect(cors.headers.get('access-control-allow-origin'), path).toBe('https://app.example');
        expect(cors.headers.get('vary'), path).toBe('Origin, Authorization, X-Public-Key');
        expect(cors.headers.get('etag'), path).toBe(tag);
        expect(cors.headers.get('cache-control'), path).toBe('private, no-cache');
      }
    }
  });

  it('an answer that carries the signing secret is no-store with no ETag, by any method; masked ones stay revalidatable', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    const secret = org.organization.jwtSecret;
    for (const method of ['GET', 'HEAD']) {
      for (const ifNoneMatch of [undefined, '*', '"stale"']) {
        const answer = await rest(lean(), '/auth/organization-details', {
          token: parentToken,
          method,
          headers: ifNoneMatch ? { 'if-none-match': ifNoneMatch } : {},
        });
        expect(answer.status, `${method} ${ifNoneMatch}`).toBe(200);
        expect(answer.headers.get('cache-control'), `${method} ${ifNoneMatch}`).toBe('no-store');
        expect(answer.headers.get('etag'), `${method} ${ifNoneMatch}`).toBeNull();
        if (method === 'GET')
          expect((answer.body as { data: { credentials: { jwtSecret: string } } }).data.credentials.jwtSecret).toBe(
            secret,
          );
      }
    }
    // Served again as the organization's shared answer (RequestContext.sharedAnswer): the same rule.
    const again = await rest(lean(), '/auth/organization-details', { token: parentToken });
    expect(again.headers.get('cache-control')).toBe('no-store');
    // The child and the public-key caller see the secret masked: revalidatable.
    for (const caller of [{ token: childToken }, { publicKey: org.parent.publicKey }]) {
      const masked = await rest(lean(), '/auth/organization-details', caller);
      expect(masked.status).toBe(200);
      expect(masked.text).not.toContain(secret);
      expect(masked.headers.get('cache-control')).toBe('private, no-cache');
      const tag = masked.headers.get('etag')!;
      expect(tag).toMatch(STRONG_TAG);
      expect(
        (await rest(lean(), '/auth/organization-details', { ...caller, headers: { 'if-none-match': tag } })).status,
      ).toBe(304);
    }
    // The parent's other answers keep their tags.
    const profile = await rest(lean(), '/auth/user-profile', { token: parentToken });
    expect(profile.headers.get('cache-control')).toBe('private, no-cache');
    expect(profile.headers.get('etag')).toMatch(STRONG_TAG);
  });

  it("a changed answer gets a new tag; another caller never gets a 304 on someone else's tag", async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    const parent = await rest(lean(), '/auth/user-profile', { token: parentToken });
    const tag = parent.headers.get('etag')!;
    // The child's own profile: another answer, another tag.
    const own = await rest(lean(), '/auth/user-profile', { token: childToken, headers: { 'if-none-match': tag } });
    expect(own.status).toBe(200);
    expect(own.headers.get('etag')).not.toBe(tag);
    const before = await rest(lean(), '/parent/credit-analysis', { token: parentToken });
    await database().prisma.organization.update({
      where: { parentId: org.parent.id },
      data: { creditBalance: { decrement: 1 } },
    });
    await expect
      .poll(
        async () =>
          (
            await rest(lean(), '/parent/credit-analysis', {
              token: parentToken,
              headers: { 'if-none-match': before.headers.get('etag')! },
            })
          ).status,
        { timeout: 10_000, interval: 20 },
      )
      .toBe(200);
  });

  it('errors are never kept: no-store, no ETag, even with If-None-Match', async () => {
    const answer = await rest(lean(), '/auth/user-profile', { token: 'nope', headers: { 'if-none-match': '*' } });
    expect(answer.status).toBe(401);
    expect(answer.headers.get('etag')).toBeNull();
    expect(answer.headers.get('cache-control')).toBe('no-store');
  });

  it('a 304 counts as a retrieval, as a 200 does: a browser that revalidates four times is counted four times, as the original API counted', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(await createChild(database(), org.parent), org);
    const first = await rest(lean(), '/auth/organization-details', { token });
    expect(await retrievals(lean(), org.parent.id)).toBe(1n);
    for (let i = 0; i < 3; i++) {
      expect(
        (
          await rest(lean(), '/auth/organization-details', {
            token,
            headers: { 'if-none-match': first.headers.get('etag')! },
          })
        ).status,
      ).toBe(304);
    }
    expect(await retrievals(lean(), org.parent.id)).toBe(4n);
    expect(
      (await rest(lean(), '/auth/organization-details', { token, headers: { 'if-none-match': '"stale"' } })).status,
    ).toBe(200);
    expect(await retrievals(lean(), org.parent.id)).toBe(5n);
    // A refused revalidation is no answer: not counted.
    expect(
      (
        await rest(lean(), '/auth/organization-details', {
          token: 'nope',
          headers: { 'if-none-match': first.headers.get('etag')! },
        })
      ).status,
    ).toBe(401);
    expect(await retrievals(lean(), org.parent.id)).toBe(5n);
  });

  for (const [transport, server] of [
    ['lean', lean],
    ['Yoga', full],
  ] as const) {
    it(`GraphQL (${transport} transport): a GET of a stored operation by id is revalidated; nothing else is kept`, async () => {
      const org = await createOrganization(database());
      // The child: the stored operation selects the secret, which the child sees masked.
      const token = await tokenFor(await createChild(database(), org.parent), org);
      const stored = STORED_OPERATIONS.find((o) => o.name === 'Organization')!;
      const extensions = encodeURIComponent(
        JSON.stringify({ persistedQuery: { version: 1, sha256Hash: operationId(stored.document) } }),
      );
      const get = (headers: Record<string, string> = {}) =>
        fetch(`${server().url}/graphql?operationName=Organization&extensions=${extensions}`, {
          headers: { authorization: `Bearer ${token}`, accept: 'application/graphql-response+json', ...headers },
        });
      const first = await get();
      expect(first.status).toBe(200);
      const tag = first.headers.get('etag')!;
      expect(tag).toMatch(STRONG_TAG);
      expect(first.headers.get('cache-control')).toBe('private, no-cache');
      const body = await first.text();
      expect(JSON.parse(body).data.organization.organizationName).toBe(org.organization.name);
      const again = await get({ 'if-none-match': tag });
      expect(again.status).toBe(304);
      expect(await again.text()).toBe('');
      expect(again.headers.get('etag')).toBe(tag);
      // The revalidation was answered: a retrieval, as the first was.
      expect(await retrievals(server(), org.parent.id)).toBe(2n);
      // The same document as text, or by POST, or failing: never kept.
      const byText = await fetch(`${server().url}/graphql?query=${encodeURIComponent(stored.document)}`, {
        headers: { authorization: `Bearer ${token}`, accept: 'application/json' },
      });
      expect(byText.headers.get('cache-control')).toBe('no-store');
      expect(byText.headers.get('etag')).toBeNull();
      const posted = await fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'if-none-match': tag },
        body: JSON.stringify({
          extensions: { persistedQuery: { version: 1, sha256Hash: operationId(stored.document) } },
        }),
      });
      expect(posted.status).toBe(200);
      expect(posted.headers.get('cache-control')).toBe('no-store');
      const refused = await fetch(`${server().url}/graphql?operationName=Organization&extensions=${extensions}`, {
        headers: { authorization: 'Bearer nope', accept: 'application/json', 'if-none-match': tag },
      });
      expect(refused.headers.get('cache-control')).toBe('no-store');
      expect(refused.headers.get('etag')).toBeNull();
    });

    it(`GraphQL (${transport} transport): an answer with the real signing secret is no-store with no ETag, by GET and POST`, async () => {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const secret = org.organization.jwtSecret;
      const stored = STORED_OPERATIONS.find((o) => o.name === 'Organization')!;
      const extensions = encodeURIComponent(
        JSON.stringify({ persistedQuery: { version: 1, sha256Hash: operationId(stored.document) } }),
      );
      const headers = {
        authorization: `Bearer ${token}`,
        accept: 'application/graphql-response+json',
        'if-none-match': '*',
      };
      const answers = [
        await fetch(`${server().url}/graphql?operationName=Organization&extensions=${extensions}`, { headers }),
        await fetch(
          `${server().url}/graphql?query=${encodeURIComponent('{ organization { credentials { jwtSecret } } }')}`,
          { headers },
        ),
        await fetch(`${server().url}/graphql`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify({ query: '{ organization { credentials { jwtSecret } } }' }),
        }),
      ];
      for (const [index, answer] of answers.entries()) {
        expect(answer.status, String(index)).toBe(200);
        expect(answer.headers.get('cache-control'), String(index)).toBe('no-store');
        expect(answer.headers.get('etag'), String(index)).toBeNull();
        expect(await answer.text(), String(index)).toContain(secret);
      }
      // The same stored operation without the secret in it (the parent's profile) keeps its tag.
      const profile = STORED_OPERATIONS.find((o) => o.name === 'Me')!;
      const profileExtensions = encodeURIComponent(
        JSON.stringify({ persistedQuery: { version: 1, sha256Hash: operationId(profile.document) } }),
      );
      const kept = await fetch(
        `${server().url}/graphql?operationName=${profile.name}&extensions=${profileExtensions}`,
        { headers: { authorization: `Bearer ${token}`, accept: 'application/json' } },
      );
      expect(kept.status).toBe(200);
      expect(kept.headers.get('cache-control')).toBe('private, no-cache');
      expect(kept.headers.get('etag')).toMatch(STRONG_TAG);
    });
  }
});

describe('If-None-Match', () => {
  it('compares weakly, reads a bounded list, and matches everything with *', () => {
    expect(noneMatch(undefined, '"a"')).toBe(true);
    expect(noneMatch('"a"', '"a"')).toBe(false);
    expect(noneMatch('W/"a"', '"a"')).toBe(false);
    expect(noneMatch(' "b" ,  "a" ', '"a"')).toBe(false);
    expect(noneMatch('"b"', '"a"')).toBe(true);
    expect(noneMatch('*', '"a"')).toBe(false);
    expect(noneMatch(`${Array.from({ length: 100 }, () => '"x"').join(',')},"a"`, '"a"')).toBe(true);
  });
});
