const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = keyof typeof LEVELS;

export type Logger = {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
};

function describe(value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

/** One JSON line per event on stderr (stdout stays for what the commands print). */
export function createLogger(level: LogLevel): Logger {
  const threshold = LEVELS[level];
  const write = (at: Exclude<LogLevel, 'silent'>) => (message: string, fields: Record<string, unknown> = {}) => {
    if (LEVELS[at] < threshold) return;
    const entry: Record<string, unknown> = { time: new Date().toISOString(), level: at, message };
    for (const [key, value] of Object.entries(fields)) entry[key] = describe(value);
    process.stderr.write(`${JSON.stringify(entry)}\n`);
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}
