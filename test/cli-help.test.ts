import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('every command explains itself with --help', () => {
  const commands: [string, string][] = [
    ['db:migrate', 'usage: npm run db:migrate'],
    ['db:seed', 'usage: npm run db:seed'],
    ['token', 'usage: npm run token'],
    ['config', 'usage: npm run config'],
    ['schema:print', 'usage: npm run schema:print'],
    ['db:diff', 'usage: npm run db:diff'],
  ];
  // As an operator runs them (npm run), from the build: the first builds if a source changed.
  it.each(commands)('npm run %s -- --help prints its usage and exits 0, touching nothing', async (command, usage) => {
    // No database is reachable: a command that tried to open one would fail instead.
    const env = { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', DATA_DIR: '/nonexistent' };
    const { stdout } = await promisify(execFile)('npm', ['run', '-s', command, '--', '--help'], { cwd: root, env, timeout: 180_000 });
    expect(stdout.startsWith(usage), stdout).toBe(true);
    expect(stdout.split('\n').length).toBeGreaterThan(2);
  }, 200_000);

  it('the built commands run from dist/, not from the TypeScript sources', async () => {
    const scripts = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).scripts as Record<string, string>;
    for (const command of ['db:migrate', 'db:seed', 'token', 'config', 'schema:print']) {
      expect(scripts[command], command).toMatch(/^node src\/cli\/ensure-built\.mjs && node dist\/cli\/[a-z-]+\.js$/);
    }
    // Current after the calls above: nothing is built again.
    const started = Date.now();
    const { stderr } = await promisify(execFile)(process.execPath, [path.join(root, 'src/cli/ensure-built.mjs')], { cwd: root });
    expect(stderr).toBe('');
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});
