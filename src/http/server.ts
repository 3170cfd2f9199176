import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Config } from '../config.js';
import { ApiError, BadRequestError, HeaderTooLargeError, ServiceUnavailableError, UriTooLongError } from '../errors.js';
import { errorEnvelope, refusedMethod, sendRestError } from '../rest/http.js';
import { Exchange } from '../exchange.js';

const DRAIN_AFTER_REFUSAL_BYTES = 4 * 1024 * 1024;
const DRAIN_AFTER_REFUSAL_MS = 2000;

/** Answers a request that Node's parser refused, in the envelope, and closes the connection. */
function refuseUnparsable(
  error: NodeJS.ErrnoException & { rawPacket?: Buffer },
  socket: Duplex,
  limits: Config['limits'],
  answered: boolean,
): void {
  // As Node's own handler: only on a connection with no answer under way (it would be corrupted).
  if (error.code === 'ECONNRESET' || !socket.writable || answered) {
    socket.destroy();
    return;
  }
  let apiError: ApiError;
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    // The request line is the first line of the head: too long when no line ends within the bound.
    const lineEnd = error.rawPacket?.indexOf(0x0a) ?? -1;
    apiError = lineEnd === -1 || lineEnd > limits.maxUrlBytes + 16 ? new UriTooLongError() : new HeaderTooLargeError();
  } else if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    apiError = new ApiError('REQUEST_TIMEOUT', 408, 'The request was not received in time.');
  } else {
    apiError = new BadRequestError();
  }
  const body = JSON.stringify(errorEnvelope(apiError));
  // What the client is still sending is read and dropped for a moment, so that the answer reaches
  // it instead of a reset; then the connection goes, whatever is left.
  let drained = 0;
  socket.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > DRAIN_AFTER_REFUSAL_BYTES) socket.destroy();
  });
  setTimeout(() => socket.destroy(), DRAIN_AFTER_REFUSAL_MS).unref();
  socket.resume();
  socket.end(
    `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/** METRICS_PORT: a server answering `GET /metrics` alone, so the metrics are not exposed with the API. */
export function createMetricsServer(
  metricsText: () => Promise<{ contentType: string; text: string }> | undefined,
): Server {
  return createServer((request, response) => {
    const exchange = new Exchange(request, response);
    if (exchange.path !== '/metrics')
      return sendRestError(exchange, new ApiError('NOT_FOUND', 404, 'Only /metrics is served on this port.'));
    if (refusedMethod(exchange)) return;
    const text = metricsText();
    if (!text)
      return sendRestError(exchange, new ServiceUnavailableError('The service is starting; try again shortly.'));
    text.then(
      ({ contentType, text }) => exchange.send(200, contentType, text),
      () => sendRestError(exchange, new ApiError('INTERNAL_ERROR', 500, 'The metrics could not be collected.')),
    );
  });
}

/** The HTTP server, with a way to close the connections that have no request under way. */
export type HttpServer = Server & {
  /** Closes every connection not being answered (idle, or with an unfinished head), for shutdown. */
  closeWaitingConnections(): void;
};

/** An answer before the app is ready: alive (a long migration must not look like a dead process), not ready. */
export function answerStarting(request: IncomingMessage, response: ServerResponse): void {
  const exchange = new Exchange(request, response);
  if (exchange.path === '/healthz') return exchange.sendJson(200, { status: 'ok' });
  response.setHeader('Connection', 'close');
  sendRestError(exchange, new ServiceUnavailableError('The service is starting; try again shortly.'));
}

/** The HTTP server around a request handler, its request head bounded by the MAX_* settings. */
export function createHttpServer(
  limits: Config['limits'],
  handle: (request: IncomingMessage, response: ServerResponse) => void,
  /** How long a request head may take (408 past it), and how often that is checked; tests shorten them. */
  timeouts: { headersMs?: number; checkEveryMs?: number } = {},
): HttpServer {
  const connections = new Set<Duplex>();
  /** Connections with an answer under way. */
  const answering = new WeakSet<Duplex>();
  /** Connections whose unparsable request was answered. */
  const refused = new WeakSet<Duplex>();
  // The Host rules are the edge's (http/app.ts), answered in the API's envelope, not Node's bare 400.
  const server = createServer(
    {
      maxHeaderSize: limits.maxHeadBytes,
      requireHostHeader: false,
      connectionsCheckingInterval: timeouts.checkEveryMs ?? 30_000,
    },
    (request, response) => {
      const socket = request.socket;
      answering.add(socket);
      response.on('close', () => answering.delete(socket));
      handle(request, response);
    },
  );
  server.on('connection', (socket: Duplex) => {
    connections.add(socket);
    socket.on('close', () => connections.delete(socket));
  });
  // No count limit in the parser (Node 24's fails the head outright): the head is bounded in bytes,
  // and the edge refuses more than MAX_HEADER_COUNT fields itself.
  server.maxHeadersCount = 0;
  server.on('clientError', (error, socket) => {
    // Node reports the parser's error again for every further chunk: answered once.
    if (refused.has(socket)) return;
    refused.add(socket);
    refuseUnparsable(error, socket, limits, answering.has(socket));
  });
  server.headersTimeout = timeouts.headersMs ?? 20_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  return Object.assign(server, {
    closeWaitingConnections() {
      for (const socket of connections) if (!answering.has(socket)) socket.destroy();
    },
  });
}
