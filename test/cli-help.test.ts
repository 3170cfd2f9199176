import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const tsx = path.join(root, 'node_modules', '.bin', 'tsx');

describe('every command explains itself with --help', () => {
  const commands: [string, string][] = [
    ['src/cli/migrate.ts', 'usage: npm run db:migrate'],
    ['src/cli/seed.ts', 'usage: npm run db:seed'],
    ['src/cli/token.ts', 'usage: npm run token'],
    ['src/cli/config.ts', 'usage: npm run config'],
    ['src/cli/print-schema.ts', 'usage: npm run schema:print'],
    ['src/cli/migration-diff.ts', 'usage: npm run db:diff'],
  ];
  it.each(commands)('%s --help prints its usage and exits 0, touching nothing', async (file, usage) => {
    // No database is reachable: a command that tried to open one would fail instead.
    const env = { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', DATA_DIR: '/nonexistent' };
    const { stdout } = await promisify(execFile)(tsx, [file, '--help'], { cwd: root, env, timeout: 60_000 });
    expect(stdout.startsWith(usage)).toBe(true);
    expect(stdout.split('\n').length).toBeGreaterThan(2);
  });
});
