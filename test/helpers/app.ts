import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, vi } from 'vitest';
import { createApp, type App } from '../../src/http/app.js';
import { buildDependencies, type DependencyOptions } from '../../src/dependencies.js';
import { createHttpServer } from '../../src/http/server.js';
import { loadConfig, type Config } from '../../src/config.js';
import type { Database } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { contractViolations, documentedPath } from './openapi.js';

export type TestServer = {
  app: App;
  url: string;
  close(): Promise<void>;
  graphql<T = Record<string, unknown>>(
    query: string,
    options?: {
      token?: string;
      publicKey?: string;
      variables?: Record<string, unknown>;
      headers?: Record<string, string>;
    },
  ): Promise<{
    status: number;
    data?: T;
    errors?: { message: string; path?: string[]; extensions?: { code?: string } }[];
  }>;
};

export async function startServer(
  database: Database,
  options: {
    env?: Record<string, string>;
    now?: () => Date;
    graphiqlHeaders?: string;
    graphqlTransport?: DependencyOptions['graphqlTransport'];
    compileAfter?: number;
    /** The heap in use as the memory pressure reads it (see `ops/memory-pressure.ts`). */
    memoryUsed?: () => number;
    httpTimeouts?: Parameters<typeof createHttpServer>[2];
    /** Wait until the cache hears the database's changes (default), as a server soon does after its start. */
    live?: boolean;
  } = {},
): Promise<TestServer> {
  const config: Config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Suites send thousands of requests from one address; the limiter has tests of its own.
    RATE_LIMIT_PER_ADDRESS: '0',
    RATE_LIMIT_PER_CREDENTIAL: '0',
    // Suites page through searches back to back on shared cores, where the searches' share of the wall
    // clock (20 % by default) refused some with 503; the share has tests of its own (search-bounds).
    SEARCH_MAX_TIME_PERCENT: '100',
    // The suite's process holds many servers and their data: the pressure is read against a heap that size
    // (the memory-budget test drives the levels itself).
    MEMORY_BUDGET_MB: '8192',
    ...options.env,
  });
  const app = createApp(
    buildDependencies({
      config,
      database,
      logger: createLogger(config.logLevel, { format: config.logFormat }),
      now: options.now,
      graphiqlHeaders: options.graphiqlHeaders,
      graphqlTransport: options.graphqlTransport,
      compileAfter: options.compileAfter,
      memoryUsed: options.memoryUsed,
    }),
  );
  const server: Server = createHttpServer(
    config.limits,
    (request, response) => app.handle(request, response),
    options.httpTimeouts,
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // A server that cannot hear them (a database not migrated, stalled or gone) starts all the same.
  if (options.live !== false) await app.deps.cache.caughtUp(10_000).catch(() => {});
  return {
    app,
    url,
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await app.close();
    },
    graphql: async (query, { token, publicKey, variables, headers = {} } = {}) => {
      const response = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(publicKey ? { 'x-public-key': publicKey } : {}),
          ...headers,
        },
        body: JSON.stringify({ query, variables }),
      });
      return { status: response.status, ...((await response.json()) as object) };
    },
  };
}

/** A server on this file's database, started before its tests and stopped after them. */
export function useServer(database: () => Database, options: Parameters<typeof startServer>[1] = {}) {
  let server: TestServer | undefined;
  beforeAll(async () => {
    server = await startServer(database(), options);
  });
  afterAll(async () => {
    await server?.close();
  });
  return () => {
    if (!server) throw new Error('the server starts in beforeAll');
    return server;
  };
}

export type RestResult = { status: number; headers: Headers; text: string; body: any };

/** A REST call through the real HTTP server. */
export async function rest(
  server: TestServer,
  path: string,
  options: { token?: string; publicKey?: string; method?: string; headers?: Record<string, string> } = {},
): Promise<RestResult> {
  const response = await fetch(`${server.url}${path}`, {
    method: options.method ?? 'GET',
    headers: {
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...(options.publicKey ? { 'x-public-key': options.publicKey } : {}),
      ...options.headers,
    },
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  const documented = documentedPath(path);
  if (documented && (options.method ?? 'GET') === 'GET') {
    const violations = contractViolations(documented, response.status, body);
    if (violations.length > 0)
      throw new Error(
        `GET ${path} answered ${response.status} outside the OpenAPI document:\n${violations.join('\n')}\n${text.slice(0, 2000)}`,
      );
  }
  return { status: response.status, headers: response.headers, text, body };
}

/** Asserts the error envelope of decisions §6. */
export function expectError(result: RestResult, status: number, code: string): void {
  if (result.status !== status || result.body?.error?.code !== code) {
    throw new Error(`expected ${status} ${code}, got ${result.status} ${result.text}`);
  }
  const keys = Object.keys(result.body).sort().join(',');
  if (
    keys !== 'error,success' ||
    result.body.success !== false ||
    typeof result.body.error.message !== 'string' ||
    Object.keys(result.body.error).sort().join(',') !== 'code,message'
  ) {
    throw new Error(`not the error envelope: ${result.text}`);
  }
}

/**
 * What the server writes to stderr during each test of the file (its log), still passed through
 * when TEST_LOG_LEVEL is set. `lines()` waits for writes in flight, then parses the JSON lines.
 */
export function useCapturedLog() {
  let written: string[] = [];
  beforeEach(() => {
    written = [];
    const write = process.stderr.write.bind(process.stderr);
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
      written.push(String(chunk));
      return (write as (...args: unknown[]) => boolean)(...(process.env.TEST_LOG_LEVEL ? [chunk, ...rest] : ['']));
    });
  });
  afterEach(() => vi.restoreAllMocks());
  return {
    text: () => written.join(''),
    lines: async (): Promise<Record<string, unknown>[]> => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return written
        .flatMap((text) => text.split('\n'))
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
    },
  };
}

/**
 * A metric's value in the Prometheus text, by its name with its labels as written (`name{label="v"}`); NaN
 * when absent.
 */
export function metricValue(text: string, name: string): number {
  return Number(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
}
