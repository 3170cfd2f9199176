import { createRequire } from 'node:module';
import { Writable } from 'node:stream';
import { traceFields } from './ops/tracing.js';
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export type Logger = {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  /** Lines that could not be written since the start (the destination failed). */
  dropped(): number;
};

type LogStream = Pick<NodeJS.WriteStream, 'write' | 'on'>;

/**
 * Where the lines go: a stream that may fail for good, as a pipe does. A failed write is counted as
 * dropped, with every line after it, and said once on stdout; nothing here throws.
 */
export class LogSink {
  private lost = 0;
  private broken = false;

  constructor(
    private readonly stream: LogStream = process.stderr,
    private readonly fallback: LogStream | undefined = process.stdout,
  ) {
    stream.on('error', (error: Error) => this.fail(error));
  }

  get dropped(): number {
    return this.lost;
  }

  write(line: string): void {
    if (this.broken) {
      this.lost += 1;
      return;
    }
    try {
      this.stream.write(line, (error) => {
        if (error) {
          this.lost += 1;
          this.fail(error);
        }
      });
    } catch (error) {
      this.lost += 1;
      this.fail(error as Error);
    }
  }

  private fail(error: Error & { code?: string }): void {
    if (this.broken) return;
    this.broken = true;
    const fallback = this.fallback;
    if (!fallback) return;
    try {
      fallback.on('error', () => undefined);
      fallback.write(
        `${JSON.stringify({ time: new Date().toISOString(), level: 'error', message: 'the log destination failed; further lines are dropped (counted in api_log_lines_dropped_total)', code: error.code ?? error.name })}\n`,
      );
    } catch {
      // Nothing is left to say it on.
    }
  }
}

const CENSOR = '[redacted]';

/**
 * Field names whose values never reach a log line, spelled out by place: the second line of defence.
 * (pino's wildcard paths cost about ten times as much a line.)
 */
const SECRET_FIELDS = (
  'authorization token accessToken password passwordHash secret jwtSecret signingSecret paginationSecret ' +
  'providerASsoClientSecret clientSecret emailVerificationToken passwordResetToken encryptionKey encryptionIv ' +
  'publicKey x-public-key connectionString databaseUrl DATABASE_URL'
).split(' ');
const SECRET_PLACES = [
  '',
  ...'error error.meta error.cause error.cause.meta headers request.headers row account organization'.split(' '),
];
export const REDACTED_PATHS = SECRET_PLACES.flatMap((at) => SECRET_FIELDS.map((field) => `${at}["${field}"]`));

/** `pino-pretty` is a development dependency: present in a checkout, absent from a production install. */
function prettyStream(sink: LogSink): DestinationStream | undefined {
  try {
    const pretty = createRequire(import.meta.url)('pino-pretty') as (
      options: Record<string, unknown>,
    ) => DestinationStream;
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        sink.write(chunk.toString());
        done();
      },
    });
    return pretty({
      destination,
      sync: true,
      messageKey: 'message',
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname',
    });
  } catch {
    return undefined;
  }
}

/** JSON lines on stderr through pino, errors serialised and redacted; pretty on a terminal outside production. */
export function createLogger(
  level: LogLevel,
  options: { format?: 'json' | 'pretty' | 'auto'; sink?: LogSink } = {},
): Logger {
  const format = options.format ?? 'auto';
  const wantsPretty =
    format === 'pretty' ||
    (format === 'auto' && process.stderr.isTTY === true && process.env.NODE_ENV !== 'production');
  // Through process.stderr: synchronous for files and pipes, so nothing is lost at exit and nothing
  // queues without bound; a destination that fails costs lines, never the process.
  const sink = options.sink ?? new LogSink();
  const destination = (wantsPretty ? prettyStream(sink) : undefined) ?? sink;
  const log: PinoLogger = pino(
    {
      level,
      messageKey: 'message',
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { error: pino.stdSerializers.err },
      redact: { paths: REDACTED_PATHS, censor: CENSOR },
      // A line logged inside a traced request joins its trace (its own fields win: the request
      // line names the request's span itself).
      mixin: () => traceFields() ?? {},
    },
    destination,
  );
  return {
    debug: (message, fields) => log.debug(fields ?? {}, message),
    info: (message, fields) => log.info(fields ?? {}, message),
    warn: (message, fields) => log.warn(fields ?? {}, message),
    error: (message, fields) => log.error(fields ?? {}, message),
    dropped: () => sink.dropped,
  };
}
