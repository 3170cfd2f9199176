import { beforeAll, describe, expect, it } from 'vitest';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { rest, useServer, type TestServer } from './helpers/app.js';
import { useOutsideWriter, useTestDatabase } from './helpers/database.js';

/**
 * An answer that shows the organization alone (`RequestContext.sharedAnswer`), GraphQL's and
 * REST's: held once for the organization's readers and once for its parent by JWT, served while
 * nothing it read changed, with the credentials verified and the retrieval counted on every request.
 */
describe("the organization's shared answer", () => {
  const database = useTestDatabase();
  const server = useServer(database);
  const outside = useOutsideWriter(database);
  const executions = () => executed(server());

  /** Makes a change outside the server and waits until its announcement has reached the cache. */
  async function announced(change: () => Promise<void>): Promise<void> {
    const cacheStats = server().app.deps.cache.stats;
    const before = cacheStats.announcements;
    await change();
    await server().app.deps.cache.caughtUp();
    expect(cacheStats.announcements).toBeGreaterThan(before);
  }

  const query = '{ organization { organizationName credentials { publicKey jwtSecret } } }';
  type Details = { organization: { organizationName: string; credentials: { publicKey: string; jwtSecret: string } } };

  let own: BuiltOrganization;
  let other: BuiltOrganization;
  let readers: [string, string, string];
  let stranger: string;
  let parentToken: string;
  beforeAll(async () => {
    own = await createOrganization(database());
    other = await createOrganization(database());
    const children = await Promise.all(
      ['shared-a', 'shared-b', 'shared-c'].map((username) => createChild(database(), own.parent, { username })),
    );
    readers = (await Promise.all(children.map((child) => tokenFor(child, own)))) as [string, string, string];
    stranger = await tokenFor(await createChild(database(), other.parent, { username: 'shared-elsewhere' }), other);
    parentToken = await tokenFor(own.parent, own);
  });

  it("is shared among the organization's readers, not with its parent by JWT nor with another organization's", async () => {
    const [a, b, c] = readers;
    const masked = {
      organizationName: own.organization.name,
      credentials: { publicKey: own.parent.publicKey, jwtSecret: '********' },
    };
    // Known as the organization's alone once run; held from the next request on.
    for (const token of [a, b])
      expect((await server().graphql<Details>(query, { token })).data?.organization).toEqual(masked);
    const ran = executions();
    for (const token of [c, b, a])
      expect((await server().graphql<Details>(query, { token })).data?.organization).toEqual(masked);
    expect((await server().graphql<Details>(query, { publicKey: own.parent.publicKey })).data?.organization).toEqual(
      masked,
    );
    expect(executions() - ran).toBe(0);
    // The parent by JWT is shown the secret: never the readers' answer, nor they its.
    for (let i = 0; i < 3; i++)
      expect(
        (await server().graphql<Details>(query, { token: parentToken })).data?.organization.credentials.jwtSecret,
      ).toBe(own.organization.jwtSecret);
    expect((await server().graphql<Details>(query, { token: c })).data?.organization).toEqual(masked);
    // Another organization's reader: its own organization.
    for (let i = 0; i < 3; i++)
      expect((await server().graphql<Details>(query, { token: stranger })).data?.organization.organizationName).toBe(
        other.organization.name,
      );
    // Asking for anything else beside it runs for each request.
    const both = '{ organization { organizationName } me { username } }';
    const before = executions();
    for (const [token, username] of [
      [a, 'shared-a'],
      [b, 'shared-b'],
      [c, 'shared-c'],
      [a, 'shared-a'],
    ] as const)
      expect((await server().graphql<{ me: { username: string } }>(both, { token })).data?.me.username).toBe(username);
    expect(executions() - before).toBe(4);
  });

  it('serves the same bytes and headers as the answer first computed, by POST and by GET', async () => {
    const [a, b] = readers;
    const post = (token: string) =>
      fetch(`${server().url}/graphql`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/graphql-response+json',
        },
        body: JSON.stringify({
          query: 'query Org($x: Int) { organization { organizationName } }',
          variables: { x: 1 },
        }),
      });
    const first = await post(a);
    const firstText = await first.text();
    expect(await (await post(a)).text()).toBe(firstText);
    const ran = executions();
    const second = await post(b);
    expect(executions()).toBe(ran);
    expect(await second.text()).toBe(firstText);
    for (const name of ['content-type', 'cache-control', 'content-length'])
      expect(second.headers.get(name), name).toBe(first.headers.get(name));
    const get = () =>
      fetch(`${server().url}/graphql?query=${encodeURIComponent(query)}`, {
        headers: { authorization: `Bearer ${a}` },
      });
    const [x, , y] = [await (await get()).text(), await (await get()).text(), await (await get()).text()];
    expect(y).toBe(x);
  });

  it('shows each change the database announces on the next request, and verifies the credentials of every one', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const token = await tokenFor(child, org);
    const name = async () =>
      (await server().graphql<Details>('{ organization { organizationName } }', { token })).data?.organization
        .organizationName;
    for (let i = 0; i < 3; i++) expect(await name()).toBe(org.organization.name);
    await announced(() =>
      outside(`UPDATE "Organization" SET name = 'Shared Renamed' WHERE "parentId" = $1`, [org.parent.id]),
    );
    expect(await name()).toBe('Shared Renamed');
    // Once shown, it stays: no answer held from before comes back.
    for (let i = 0; i < 5; i++) expect(await name()).toBe('Shared Renamed');
    await announced(() =>
      outside(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [
        child.id,
      ]),
    );
    const refused = await server().graphql('{ organization { organizationName } }', { token });
    expect(refused.errors?.[0]?.extensions?.code).toBe('ACCOUNT_INACTIVE');
    // Without credentials, no answer is found.
    expect((await server().graphql('{ organization { organizationName } }')).errors?.[0]?.extensions?.code).toBe(
      'MISSING_PARENT_PUBLIC_KEY',
    );
  });

  it('counts a retrieval for every answer served, held or not', async () => {
    const org = await createOrganization(database());
    const token = await tokenFor(org.parent, org);
    const ran = executions();
    for (let i = 0; i < 5; i++)
      expect(
        (await server().graphql('{ organization { organizationName } }', { token })).errors,
        `request ${i}`,
      ).toBeUndefined();
    for (let i = 0; i < 3; i++)
      expect((await rest(server(), '/auth/organization-details', { token })).status, `REST ${i}`).toBe(200);
    // The document was known from the tests before: its answer was computed once, and served held.
    expect(executions() - ran).toBe(1);
    await server().app.deps.retrievals.flush();
    const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: org.parent.id } });
    expect(row.detailsRetrievalCount).toBe(8n);
  });

  it("holds REST's organization details the same way, with their ETag, dropped by a change", async () => {
    const [a, b, c] = readers;
    const details = (token: string, headers?: Record<string, string>) =>
      rest(server(), '/auth/organization-details', { token, ...(headers ? { headers } : {}) });
    const first = await details(a);
    const second = await details(b);
    expect(second.text).toBe(first.text);
    expect(second.headers.get('etag')).toBe(first.headers.get('etag'));
    expect(second.body.data.credentials.jwtSecret).toBe('********');
    expect((await details(c, { 'if-none-match': first.headers.get('etag')! })).status).toBe(304);
    const owner = await details(parentToken);
    expect(owner.body.data.credentials.jwtSecret).toBe(own.organization.jwtSecret);
    expect(owner.headers.get('etag')).toBeNull();
    expect((await details(stranger)).body.data.organizationName).toBe(other.organization.name);
    await announced(() =>
      outside(`UPDATE "Organization" SET name = 'REST Renamed' WHERE "parentId" = $1`, [own.parent.id]),
    );
    const renamed = await details(b);
    expect(renamed.body.data.organizationName).toBe('REST Renamed');
    expect(renamed.headers.get('etag')).not.toBe(first.headers.get('etag'));
  });
});

/** Executions the pipeline ran, on either engine. */
function executed(server: TestServer): number {
  const counts = server.app.executions();
  return counts.compiled + counts.reference;
}
