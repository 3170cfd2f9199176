import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { rest, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/** The request log: one line per answer, saying who asked and how it went, and never a credential. */
describe(`the request log line (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { LOG_LEVEL: 'info' } });
  let written: string[] = [];
  beforeEach(() => {
    written = [];
    const write = process.stderr.write.bind(process.stderr);
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
      written.push(String(chunk));
      return (write as (...args: unknown[]) => boolean)(...(process.env.TEST_LOG_LEVEL ? [chunk, ...rest] : ['']));
    });
  });
  afterEach(() => vi.restoreAllMocks());

  /** The log lines of answered requests so far, parsed. */
  const requests = async () => {
    await new Promise((resolve) => setTimeout(resolve, 20));
    return written.flatMap((text) => text.split('\n')).filter((line) => line.includes('"message":"request"')).map((line) => JSON.parse(line) as Record<string, unknown>);
  };

  it('names the route, status, duration, caller kind and organization, the code and the GraphQL operation', async () => {
    const org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    const [parentToken, childToken] = [await tokenFor(org.parent, org), await tokenFor(child, org)];
    expect((await rest(server(), '/auth/user-profile?secret=1', { token: parentToken })).status).toBe(200);
    expect((await rest(server(), '/auth/organization-details', { publicKey: org.parent.publicKey })).status).toBe(200);
    expect((await rest(server(), '/auth/user-profile')).status).toBe(401);
    expect((await server().graphql('query Screen { me { userID } }', { token: childToken })).status).toBe(200);
    const [profile, details, anonymous, graphql] = await requests();
    expect(profile).toMatchObject({ method: 'GET', route: '/auth/user-profile', status: 200, caller: 'parent', organizationId: org.parent.id });
    expect(typeof profile!.durationMs).toBe('number');
    expect(profile!.requestId).toEqual(expect.any(String));
    expect(details).toMatchObject({ route: '/auth/organization-details', status: 200, caller: 'publicKey', organizationId: org.parent.id });
    expect(anonymous).toMatchObject({ route: '/auth/user-profile', status: 401, caller: 'anonymous', code: 'UNAUTHORIZED' });
    expect(anonymous!.organizationId).toBeUndefined();
    expect(graphql).toMatchObject({ method: 'POST', route: '/graphql', status: 200, caller: 'child', organizationId: org.parent.id, operation: 'me' });
    // Never a credential, and not the raw target with its query.
    const all = written.join('');
    for (const secret of [parentToken, childToken, org.parent.publicKey, 'secret=1']) expect(all).not.toContain(secret);
  });
});
