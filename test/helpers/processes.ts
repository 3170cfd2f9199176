import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { expect } from 'vitest';

/** Servers and commands as child processes, as an operator runs them. */

export const root = path.resolve(import.meta.dirname, '..', '..');

/** `closed`: the process has exited and its output is all read. */
export type Run = {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; at: number }>;
  closed: () => boolean;
};

/**
 * Node itself on a built script (`dist/main.js`, `dist/cli/token.js`: the test command builds
 * once before the tiers run), so that signals reach the process and no wrapper, and no start
 * compiles TypeScript.
 */
export function run(
  script: string,
  env: NodeJS.ProcessEnv,
  args: string[] = [],
  options: { cwd?: string; nodeArgs?: string[]; stdin?: boolean } = {},
): Run {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...args], {
    cwd: options.cwd ?? root,
    env,
    stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.on('exit', (code) => resolve({ code, at: Date.now() })),
  );
  let closed = false;
  child.on('close', () => (closed = true));
  return { child, output: () => output, exited, closed: () => closed };
}

export function baseEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'warn',
    SEED_DEMO_ON_START: 'false',
    RATE_LIMIT_PER_ADDRESS: '0',
    RATE_LIMIT_PER_CREDENTIAL: '0',
    ...extra,
  };
  delete env.DATABASE_URL;
  if (extra.DATABASE_URL) env.DATABASE_URL = extra.DATABASE_URL;
  return env;
}

export async function listening(server: Run): Promise<string> {
  return printed(server, /listening on (http:\/\/\S+)/);
}

/**
 * The first group of `pattern` once the process has printed it, checked at each chunk it writes
 * (its lines can arrive in several chunks: what follows "listening on" may come a moment later).
 * Fails when the process exits without printing it, or after a minute (a no-hang bound: a start
 * prints its line within a few seconds on an idle machine).
 */
export function printed(server: Run, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const found = pattern.exec(server.output())?.[1];
      if (found === undefined) return false;
      done();
      resolve(found);
      return true;
    };
    const gone = () => {
      if (check()) return;
      done();
      reject(new Error(`the process ended without printing ${pattern}:\n${server.output()}`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`the process did not print ${pattern} within 60 s:\n${server.output()}`));
    }, 60_000);
    const done = () => {
      clearTimeout(timer);
      server.child.stdout!.off('data', check);
      server.child.stderr!.off('data', check);
      server.child.off('close', gone);
    };
    // After the run's own listeners (registered first), so the output holds the chunk.
    server.child.stdout!.on('data', check);
    server.child.stderr!.on('data', check);
    server.child.on('close', gone);
    if (!check() && server.closed()) gone();
  });
}

/** What a failed start printed: one line, no stack trace. */
export function expectOneLine(output: string, pattern: RegExp) {
  const lines = output
    .split('\n')
    .filter(
      (line) => line.trim() !== '' && !line.includes('ExperimentalWarning') && !line.includes('--trace-warnings'),
    );
  expect(lines, output).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(output).not.toMatch(/\n\s+at /);
}
