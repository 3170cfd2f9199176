import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { expect } from 'vitest';

/** Servers and commands as child processes, as an operator runs them. */

export const root = path.resolve(import.meta.dirname, '..', '..');

export type Run = { child: ChildProcess; output: () => string; exited: Promise<{ code: number | null; at: number }> };

/** Node itself (from the sources: with tsx as a loader), so that signals reach the process and no wrapper. */
export function run(script: string, env: NodeJS.ProcessEnv, args: string[] = [], options: { cwd?: string; tsx?: boolean; nodeArgs?: string[] } = {}): Run {
  const loader = options.tsx === false ? [] : ['--import', 'tsx'];
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), ...loader, script, ...args], { cwd: options.cwd ?? root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<{ code: number | null; at: number }>((resolve) => child.on('exit', (code) => resolve({ code, at: Date.now() })));
  return { child, output: () => output, exited };
}

export function baseEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'warn', SEED_DEMO_ON_START: 'false', RATE_LIMIT_PER_ADDRESS: '0', RATE_LIMIT_PER_CREDENTIAL: '0', ...extra };
  delete env.DATABASE_URL;
  if (extra.DATABASE_URL) env.DATABASE_URL = extra.DATABASE_URL;
  return env;
}

export async function listening(server: Run): Promise<string> {
  return printed(server, /listening on (http:\/\/\S+)/);
}

/**
 * The first group of `pattern` once the process has printed it (its lines can arrive in several
 * chunks: what follows "listening on" may come a moment later).
 */
export async function printed(server: Run, pattern: RegExp): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const found = pattern.exec(server.output())?.[1];
    if (found) return found;
    if (server.child.exitCode !== null) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`the process did not print ${pattern}:\n${server.output()}`);
}

/** What a failed start printed: one line, no stack trace. */
export function expectOneLine(output: string, pattern: RegExp) {
  const lines = output.split('\n').filter((line) => line.trim() !== '' && !line.includes('ExperimentalWarning') && !line.includes('--trace-warnings'));
  expect(lines, output).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(output).not.toMatch(/\n\s+at /);
}

