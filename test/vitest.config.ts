import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const root = fileURLToPath(new URL('..', import.meta.url));

/*
 * The in-process tier (`npm test`): every file under test/ but e2e/. A file waits on its embedded
 * database (a worker thread) or on PostgreSQL more than it computes, so three files overlap on two
 * cores (TEST_WORKERS overrides). Each file is a fork of its own, its database its own copy of the
 * migrated one: nothing a file leaves behind reaches another.
 */
/** What both tiers share. */
export const shared = {
  root,
  // Node resolves `graphql` (no "exports" map) to its CommonJS build, Vite to its ESM build; one
  // copy for everybody, as in production, or schema objects fail graphql-js' instanceof checks.
  resolve: { alias: [{ find: /^graphql$/, replacement: `${root}node_modules/graphql/index.js` }] },
};

export default defineConfig({
  ...shared,
  test: {
    include: ['test/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: Number(process.env.TEST_WORKERS ?? 3),
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
