import type { IncomingMessage } from 'node:http';
import { ClientClosedError, PayloadTooLargeError } from '../errors.js';

/**
 * The request body, whole, refused 413 past `maxBytes` (declared or sent) before it is all read.
 * Read with the stream's events rather than its async iterator, which costs an allocation per
 * chunk and per request; a body with a declared length is whole once that many bytes came.
 */
export function readBody(request: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new PayloadTooLargeError());
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (error?: Error) => {
      request.off('data', onData);
      request.off('end', onEnd);
      request.off('error', onError);
      request.off('close', onClose);
      if (error) reject(error);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        // The rest is not read: the answer closes the connection.
        request.pause();
        return done(new PayloadTooLargeError());
      }
      chunks.push(chunk);
      // The declared length has arrived (the parser sends no more than it): the body is whole
      // without waiting for the stream's end, a tick later.
      if (size === declared) done();
    };
    const onEnd = () => done();
    // A client that hangs up mid-body is not a server error: there is nobody to answer.
    const onError = () => done(new ClientClosedError());
    const onClose = () => {
      if (!request.complete) done(new ClientClosedError());
    };
    request.on('data', onData);
    request.on('end', onEnd);
    request.on('error', onError);
    request.on('close', onClose);
  });
}
