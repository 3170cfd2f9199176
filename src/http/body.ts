import type { IncomingMessage } from 'node:http';
import { ClientClosedError, PayloadTooLargeError } from '../errors.js';

/** The request body, whole, refused 413 past `maxBytes` (declared or sent) before it is all read. */
export async function readBody(request: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) throw new PayloadTooLargeError();
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of request as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) throw new PayloadTooLargeError();
      chunks.push(chunk);
    }
  } catch (error) {
    // A client that hangs up mid-body is not a server error: there is nobody to answer.
    if (!(error instanceof PayloadTooLargeError) && (request.destroyed || request.socket.destroyed)) throw new ClientClosedError();
    throw error;
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}
