import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const root = fileURLToPath(new URL('..', import.meta.url));

export default defineConfig({
  root,
  // Node resolves `graphql` (no "exports" map) to its CommonJS build, Vite to its ESM build; one
  // copy for everybody, as in production, or schema objects fail graphql-js' instanceof checks.
  resolve: { alias: [{ find: /^graphql$/, replacement: `${root}node_modules/graphql/index.js` }] },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
