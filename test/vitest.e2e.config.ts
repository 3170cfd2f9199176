import { defineConfig } from 'vitest/config';
import { shared } from './vitest.config.js';

/*
 * The process tier (`npm run test:e2e`): what must run as real processes (test/e2e/). Its files
 * mostly wait on the processes, clusters and browsers they start; two overlap on two cores
 * (TEST_WORKERS overrides): more would make their waits a race for the CPU.
 */
export default defineConfig({
  ...shared,
  test: {
    include: ['test/e2e/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: Number(process.env.TEST_WORKERS ?? 2),
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
