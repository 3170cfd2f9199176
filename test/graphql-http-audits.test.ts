import { serverAudits } from 'graphql-http';
import { describe, expect, it } from 'vitest';
import { useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/*
 * GraphQL over HTTP conformance: graphql-http's server audits (the specification's reference
 * implementation) against /graphql, in development and in production, on the lean transport and on
 * the full server. Every audit, MUST, SHOULD and MAY, passes. Four of them send their variables to
 * `__type`, an introspection field: production runs them with introspection on, and with it off
 * (the production default) exactly those four are refused and nothing else.
 */
describe(`GraphQL over HTTP audits (${testMode})`, () => {
  const database = useTestDatabase();
  const servers = {
    development: useServer(database, { env: { NODE_ENV: 'development', GRAPHIQL: 'true' } }),
    production: useServer(database, { env: { NODE_ENV: 'production', INTROSPECTION: 'true' } }),
    'full server': useServer(database, {
      env: { NODE_ENV: 'production', INTROSPECTION: 'true' },
      graphqlTransport: 'full',
    }),
  };
  for (const [name, server] of Object.entries(servers)) {
    it(`passes every audit: ${name}`, async () => {
      const audits = serverAudits({ url: () => `${server().url}/graphql` });
      const failed: string[] = [];
      for (const audit of audits) {
        const result = await audit.fn();
        if (result.status !== 'ok') failed.push(`${audit.name}: ${result.reason}`);
      }
      expect(audits.length).toBeGreaterThanOrEqual(61);
      expect(failed).toEqual([]);
    });
  }

  const closed = useServer(database, { env: { NODE_ENV: 'production' } });
  it('with introspection off, refuses only the audits that ask for __type', async () => {
    const failed: string[] = [];
    for (const audit of serverAudits({ url: () => `${closed().url}/graphql` })) {
      if ((await audit.fn()).status !== 'ok') failed.push(audit.name);
    }
    expect(failed).toHaveLength(4);
    for (const name of failed) expect(name).toMatch(/\{variables\} parameter/);
  });
});
