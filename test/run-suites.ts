import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * The test command: the whole suite on PGlite, then again on PostgreSQL — the server named by
 * TEST_DATABASE_URL, or a throwaway cluster on loopback started from the PostgreSQL server
 * binaries on this machine. In CI (CI=true) a missing PostgreSQL fails the run. The last line is
 * "N passed, N failed" summed over both passes.
 */

const root = fileURLToPath(new URL('..', import.meta.url));
const extraArgs = process.argv.slice(2);
const inCi = process.env.CI === 'true' || process.env.CI === '1';

type Counts = { passed: number; failed: number; skipped: number; ok: boolean };

function runVitest(label: string, env: NodeJS.ProcessEnv): Promise<Counts> {
  const report = path.join(mkdtempSync(path.join(tmpdir(), 'vitest-report-')), 'report.json');
  console.log(`\n=== test suite on ${label} ===`);
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        path.join(root, 'node_modules', 'vitest', 'vitest.mjs'),
        'run',
        '--config',
        'test/vitest.config.ts',
        '--reporter=default',
        '--reporter=json',
        `--outputFile.json=${report}`,
        ...extraArgs,
      ],
      { cwd: root, env, stdio: 'inherit' },
    );
    child.on('exit', (code) => {
      let counts: Counts = { passed: 0, failed: 0, skipped: 0, ok: false };
      if (existsSync(report)) {
        const json = JSON.parse(readFileSync(report, 'utf8')) as {
          numPassedTests: number;
          numFailedTests: number;
          numPendingTests: number;
          numTodoTests: number;
          numFailedTestSuites: number;
        };
        counts = {
          passed: json.numPassedTests,
          failed: json.numFailedTests + json.numFailedTestSuites,
          skipped: json.numPendingTests + json.numTodoTests,
          ok: code === 0,
        };
      } else {
        counts.failed = 1;
      }
      rmSync(path.dirname(report), { recursive: true, force: true });
      resolve(counts);
    });
  });
}

function postgresBinDir(): string | undefined {
  const fromEnv = process.env.PG_BINDIR;
  if (fromEnv && existsSync(path.join(fromEnv, 'initdb'))) return fromEnv;
  const pgConfig = spawnSync('pg_config', ['--bindir'], { encoding: 'utf8' });
  const candidates: string[] = [];
  if (pgConfig.status === 0) candidates.push(pgConfig.stdout.trim());
  if (existsSync('/usr/lib/postgresql')) {
    for (const version of readdirSync('/usr/lib/postgresql').sort().reverse()) {
      candidates.push(path.join('/usr/lib/postgresql', version, 'bin'));
    }
  }
  return candidates.find((dir) => existsSync(path.join(dir, 'initdb')) && existsSync(path.join(dir, 'pg_ctl')));
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

type Cluster = { url: string; stop(): void };

/** initdb refuses to run as root, so as root the cluster belongs to the `postgres` system user. */
async function startCluster(binDir: string): Promise<Cluster> {
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(tmpdir(), 'pg-test-'));
  const dataDir = path.join(dir, 'data');
  if (asRoot) {
    const ids = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const gids = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
    if (ids.status !== 0) throw new Error('running as root and there is no `postgres` user to run the cluster');
    chownSync(dir, Number(ids.stdout.trim()), Number(gids.stdout.trim()));
    chmodSync(dir, 0o700);
  }
  const as = (command: string, args: string[]) => {
    const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
    const result = spawnSync(cmd, argv, { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`${command} failed:\n${result.stdout}${result.stderr}`);
  };
  const port = await freePort();
  as(path.join(binDir, 'initdb'), ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync']);
  as(path.join(binDir, 'pg_ctl'), [
    '-D', dataDir, '-l', path.join(dir, 'server.log'), '-w', '-t', '60',
    '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200`,
    'start',
  ]);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop: () => {
      try {
        as(path.join(binDir, 'pg_ctl'), ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

const totals: Counts[] = [];
const { TEST_DATABASE_URL: _ignored, ...baseEnv } = process.env;
totals.push(await runVitest('PGlite (embedded)', baseEnv));

let postgresProblem: string | undefined;
if (process.env.TEST_DATABASE_URL) {
  totals.push(await runVitest('PostgreSQL (TEST_DATABASE_URL)', { ...baseEnv, TEST_DATABASE_URL: process.env.TEST_DATABASE_URL }));
} else {
  const binDir = postgresBinDir();
  if (!binDir) {
    postgresProblem = 'no PostgreSQL server binaries found (pg_config --bindir) and TEST_DATABASE_URL is not set';
  } else {
    let cluster: Cluster | undefined;
    try {
      cluster = await startCluster(binDir);
      totals.push(await runVitest(`PostgreSQL (throwaway cluster from ${binDir})`, { ...baseEnv, TEST_DATABASE_URL: cluster.url }));
    } catch (error) {
      postgresProblem = `could not start a PostgreSQL cluster: ${error instanceof Error ? error.message : String(error)}`;
    } finally {
      cluster?.stop();
    }
  }
}

let failed = totals.reduce((sum, c) => sum + c.failed, 0);
const passed = totals.reduce((sum, c) => sum + c.passed, 0);
const skipped = totals.reduce((sum, c) => sum + c.skipped, 0);
let ok = totals.every((c) => c.ok);
if (postgresProblem) {
  if (inCi) {
    console.error(`\nPostgreSQL pass: ${postgresProblem} (a failure in CI)`);
    failed += 1;
    ok = false;
  } else {
    console.warn(`\nPostgreSQL pass skipped: ${postgresProblem}`);
  }
}
if (passed === 0) ok = false;
console.log(`\n${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(ok ? 0 : 1);
