import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Database } from './db/database.js';

export type App = { handle(request: IncomingMessage, response: ServerResponse): void };

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  response.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
  });
  response.end(payload);
}

/** The request handler: health now; the API's transports are mounted here. */
export function createApp(database: Database): App {
  return {
    handle(request, response) {
      const url = new URL(request.url ?? '/', 'http://localhost');
      if (url.pathname === '/health') {
        database.sql
          .query('SELECT 1 AS ok')
          .then(() => sendJson(response, 200, { status: 'ok', database: database.kind }))
          .catch(() =>
            sendJson(response, 503, {
              success: false,
              error: { code: 'SERVICE_UNAVAILABLE', message: 'The database is unreachable.' },
            }),
          );
        return;
      }
      sendJson(response, 404, {
        success: false,
        error: { code: 'NOT_FOUND', message: `No resource at ${url.pathname}.` },
      });
    },
  };
}
