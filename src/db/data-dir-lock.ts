import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { hostname } from 'node:os';
import path from 'node:path';

/*
 * The embedded database's folder belongs to one process at a time: two writing it lose data. On
 * Linux the kernel decides, by an abstract Unix socket named after the folder (binding is atomic and
 * freed when the owner dies); elsewhere the owner file is the lock. The owner file `.owner` says who
 * holds the folder and where its database answers, so read-only commands can use it.
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
  release(): void;
  /** Names the folder of the socket the database answers on, for commands run beside this process. */
  advertise(socketDir: string): void;
};

/** How long an owner that holds the folder but has not written its record yet is waited for. */
const RECORD_GRACE_MS = 1000;

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

/** The record in a file of its own beside `file`, complete and on disk: to be linked or renamed into place. */
function writeAside(file: string, owner: Owner): string {
  const aside = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  const fd = openSync(aside, 'wx');
  try {
    writeSync(fd, JSON.stringify(owner));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return aside;
}

/** The whole record replaces whatever is at `file`, atomically. */
function replaceRecord(file: string, owner: Owner): void {
  renameSync(writeAside(file, owner), file);
}

/** The owner's record, waiting a moment for one that holds the folder but has not written it yet. */
async function ownerOf(file: string): Promise<Owner> {
  const until = Date.now() + RECORD_GRACE_MS;
  for (;;) {
    const owner = readOwner(file);
    if ((owner && alive(owner)) || Date.now() > until)
      return owner ?? { pid: 0, host: hostname(), what: 'another process', since: '' };
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Linux: the folder's name in the abstract socket namespace, bound for as long as it is held. */
async function holdByKernel(dataDir: string): Promise<Server | undefined> {
  const name = `\0credits-read-api/data-dir/${createHash('sha256').update(realpathSync(dataDir)).digest('hex')}`;
  const holder = createServer();
  return new Promise((resolve, reject) => {
    holder.once('error', (error: NodeJS.ErrnoException) =>
      error.code === 'EADDRINUSE' ? resolve(undefined) : reject(error),
    );
    holder.listen(name, () => {
      // Held, not served: it keeps nothing alive and answers nobody.
      holder.unref();
      holder.on('connection', (socket) => socket.destroy());
      resolve(holder);
    });
  });
}

/** How long a takeover may hold its marker before another process may assume it died mid-way. */
const TAKEOVER_STALE_MS = 10_000;

/** Blocks this thread for a moment (the file mechanism is synchronous, and this is rare). */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The right to replace a dead owner's record: a folder one process at a time can create (removed when old). */
function takeTakeover(marker: string): boolean {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      mkdirSync(marker);
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const since = statSync(marker, { throwIfNoEntry: false })?.mtimeMs;
      if (since === undefined || Date.now() - since < TAKEOVER_STALE_MS) return false;
      rmSync(marker, { recursive: true, force: true });
    }
  }
  return false;
}

/**
 * Elsewhere: the owner file, linked into place whole; a dead owner's record is replaced under the
 * takeover marker, by one rename, so the folder is never without a record.
 */
function holdByFile(file: string, mine: Owner): boolean {
  const marker = `${file}.takeover`;
  for (let attempt = 0; attempt < 5; attempt++) {
    const aside = writeAside(file, mine);
    try {
      linkSync(aside, file);
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    } finally {
      rmSync(aside, { force: true });
    }
    const owner = readOwner(file);
    // A record being written is whole the moment it appears; an unreadable one is from a crash
    // of an older version mid-write, or a folder being copied: not judged, refused.
    if (!owner || alive(owner)) return false;
    if (!takeTakeover(marker)) {
      // Another process is replacing the dead owner: it will own the folder.
      pause(50);
      continue;
    }
    try {
      const current = readOwner(file);
      if (current && current.pid === owner.pid && current.since === owner.since && current.host === owner.host) {
        renameSync(writeAside(file, mine), file);
        return true;
      }
    } finally {
      rmSync(marker, { recursive: true, force: true });
    }
  }
  return false;
}

/** Takes the folder for this process, or throws DataDirInUseError (`by`: the kernel's way or the file's). */
export async function lockDataDir(
  dataDir: string,
  what: string,
  by: 'kernel' | 'file' = process.platform === 'linux' ? 'kernel' : 'file',
): Promise<DataDirLock> {
  const file = path.join(dataDir, '.owner');
  const mine: Owner = { pid: process.pid, host: hostname(), what, since: new Date().toISOString() };
  let holder: Server | undefined;
  if (by === 'kernel') {
    holder = await holdByKernel(dataDir);
    if (!holder) throw new DataDirInUseError(dataDir, await ownerOf(file));
    const previous = readOwner(file);
    if (previous && previous.host !== hostname()) {
      holder.close();
      throw new DataDirInUseError(dataDir, previous);
    }
    replaceRecord(file, mine);
  } else if (!holdByFile(file, mine)) {
    throw new DataDirInUseError(dataDir, await ownerOf(file));
  }
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    process.off('exit', release);
    if (readOwner(file)?.pid === process.pid) rmSync(file, { force: true });
    holder?.close();
  };
  process.on('exit', release);
  const advertise = (socketDir: string) => {
    if (!released) replaceRecord(file, { ...mine, socketDir });
  };
  return { release, advertise };
}
