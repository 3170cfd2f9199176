import { existsSync, openSync, readFileSync, rmSync, writeFileSync, closeSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';

/*
 * The embedded database's folder belongs to one process at a time: PGlite is a database engine
 * inside the process, and two processes writing one folder lose data. The owner writes
 * `.owner` in the folder (pid, host, what it is); another process refuses to open the folder
 * while that owner lives. An owner that died without removing the file (a crash, kill -9) is
 * detected by its pid and replaced. The owner also names the private folder of the socket its
 * embedded database answers on, so that a read-only command (`npm run token`) can use the running
 * server's database instead of being refused.
 */

export class DataDirInUseError extends Error {
  constructor(
    dataDir: string,
    readonly owner: Owner,
  ) {
    super(`${dataDir} is in use by ${owner.what} (pid ${owner.pid}): stop it, or use DATABASE_URL`);
    this.name = 'DataDirInUseError';
  }
}

export type Owner = { pid: number; host: string; what: string; since: string; socketDir?: string };

export type DataDirLock = {
  /** Gives the folder up (also done at exit). */
  release(): void;
  /** Names the folder of the socket the database answers on, for commands run beside this process. */
  advertise(socketDir: string): void;
};

/** Whether the process that wrote `owner` still runs (and is a Node process, not a reused pid). */
function alive(owner: Owner): boolean {
  if (owner.host !== hostname()) return true;
  if (owner.pid === process.pid) return false;
  try {
    process.kill(owner.pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  const cmdline = `/proc/${owner.pid}/cmdline`;
  if (!existsSync(cmdline)) return true;
  try {
    return /node|tsx/.test(readFileSync(cmdline, 'utf8'));
  } catch {
    return true;
  }
}

function readOwner(file: string): Owner | undefined {
  try {
    const owner = JSON.parse(readFileSync(file, 'utf8')) as Partial<Owner>;
    if (typeof owner.pid !== 'number' || typeof owner.host !== 'string') return undefined;
    return {
      pid: owner.pid,
      host: owner.host,
      what: typeof owner.what === 'string' ? owner.what : 'another process',
      since: String(owner.since),
      ...(typeof owner.socketDir === 'string' ? { socketDir: owner.socketDir } : {}),
    };
  } catch {
    return undefined;
  }
}

/** Takes the folder for this process, or throws DataDirInUseError. */
export function lockDataDir(dataDir: string, what: string): DataDirLock {
  const file = path.join(dataDir, '.owner');
  const mine: Owner = { pid: process.pid, host: hostname(), what, since: new Date().toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx');
      writeFileSync(fd, JSON.stringify(mine));
      closeSync(fd);
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        process.off('exit', release);
        if (readOwner(file)?.pid === process.pid) rmSync(file, { force: true });
      };
      process.on('exit', release);
      const advertise = (socketDir: string) => {
        if (!released) writeFileSync(file, JSON.stringify({ ...mine, socketDir }));
      };
      return { release, advertise };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = readOwner(file);
      if (owner && alive(owner)) throw new DataDirInUseError(dataDir, owner);
      // A stale owner (dead, or an unreadable file left by a crash mid-write): replaced.
      rmSync(file, { force: true });
    }
  }
  throw new Error(`could not take ${file}: another process is taking it at the same time`);
}
