import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll } from 'vitest';
import { createApp, type App } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/config.js';
import type { Database } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';

export type TestServer = {
  app: App;
  url: string;
  close(): Promise<void>;
  graphql<T = Record<string, unknown>>(
    query: string,
    options?: { token?: string; publicKey?: string; variables?: Record<string, unknown>; headers?: Record<string, string> },
  ): Promise<{ status: number; data?: T; errors?: { message: string; path?: string[]; extensions?: { code?: string } }[] }>;
};

export async function startServer(
  database: Database,
  options: { env?: Record<string, string>; now?: () => Date } = {},
): Promise<TestServer> {
  const config: Config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent', ...options.env });
  const app = createApp({ config, database, logger: createLogger(config.logLevel), now: options.now });
  const server: Server = createServer((request, response) => app.handle(request, response));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
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
export function useServer(database: () => Database, options: { env?: Record<string, string>; now?: () => Date } = {}) {
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
