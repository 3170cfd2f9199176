#!/usr/bin/env node
// Runs the Prisma 7 CLI without its native schema engine. The CLI insists on a schema-engine file
// and downloads one from outside the npm registry when none is configured; `prisma generate`
// never executes it, so any existing file satisfies the check. Commands that do need the engine
// (migrate deploy/status, db push) fail here as they would offline: see the README's "Migrations".
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
let cli;
try {
  cli = require.resolve('prisma/build/index.js');
} catch {
  // A production install without devDependencies: the client was generated at build time.
  console.warn('prisma CLI not installed; skipping `prisma', process.argv.slice(2).join(' '), '`');
  process.exit(0);
}
const placeholder = fileURLToPath(import.meta.url);
const env = {
  ...process.env,
  PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? placeholder,
  PRISMA_HIDE_UPDATE_MESSAGE: '1',
  CHECKPOINT_DISABLE: '1',
};
const result = spawnSync(process.execPath, [cli, ...process.argv.slice(2)], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
