import type { Config } from '../config.js';
import { redactUrl } from '../db/database.js';
import { DataDirInUseError } from '../db/data-dir-lock.js';
import { MigrationError } from '../db/migrator.js';

/** A failure whose message is already the line to print (it says what failed and what to do). */
export class StartFailure extends Error {}

type Failure = { code?: unknown; message?: unknown; syscall?: unknown; cause?: unknown; errors?: unknown };

/** The first error in a chain (cause, AggregateError) that carries a code. */
function coded(error: unknown): Failure | undefined {
  for (let e: unknown = error, depth = 0; e && depth < 6; depth++) {
    const failure = e as Failure;
    if (typeof failure.code === 'string') return failure;
    e = failure.cause ?? (Array.isArray(failure.errors) ? failure.errors[0] : undefined);
  }
  return undefined;
}

function where(config: Config): string {
  if (!config.databaseUrl) return config.dataDir;
  try {
    const url = new URL(config.databaseUrl);
    return `${url.hostname}:${url.port || '5432'}`;
  } catch {
    return redactUrl(config.databaseUrl);
  }
}

/** Why the process could not start, and what to do about it, in one line. */
export function describeStartFailure(error: unknown, config: Config): string {
  const failure = coded(error);
  const code = failure?.code;
  const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
  if (failure?.syscall === 'listen' || code === 'EADDRINUSE') {
    if (code === 'EADDRINUSE')
      return `port ${config.port} is in use on ${config.host}: stop what holds it, or set PORT`;
    if (code === 'EACCES')
      return `not allowed to listen on ${config.host}:${config.port}: set PORT (above 1023) or HOST`;
    if (code === 'EADDRNOTAVAIL') return `${config.host} is not an address of this machine: set HOST`;
  }
  if (error instanceof StartFailure) return message;
  if (error instanceof MigrationError) return `migrations: ${message}`;
  if (error instanceof DataDirInUseError) return message;
  if (!config.databaseUrl) return `cannot open the embedded database in ${config.dataDir}: ${message}`;
  if (code === '3D000')
    return `the database named in DATABASE_URL does not exist at ${where(config)}: create it, or fix DATABASE_URL`;
  if (code === '28P01' || code === '28000')
    return `PostgreSQL at ${where(config)} refused the user or password in DATABASE_URL`;
  if (
    code === 'ECONNREFUSED' ||
    code === 'ENOTFOUND' ||
    code === 'EHOSTUNREACH' ||
    code === 'ETIMEDOUT' ||
    /timeout|terminated/i.test(message)
  ) {
    return `cannot reach the database at ${where(config)}: ${message}: check DATABASE_URL and that PostgreSQL is running`;
  }
  return message;
}
