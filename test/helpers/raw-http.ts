import { request as httpRequest } from 'node:http';
import net from 'node:net';

/** An answer read off the wire: every header line as sent, and the body as framed by the server. */
export type RawAnswer = {
  status: number;
  /** Header lines in order, names lower-cased. */
  headers: [string, string][];
  header(name: string): string | undefined;
  body: string;
  json: any;
  /** The bytes as received, for framing checks. */
  raw: Buffer;
};

/**
 * Sends `head` (and `body`) exactly as given on a new connection — no client-side normalisation
 * of the path or the Host header — and reads until the server closes. Strict: a head with both
 * Transfer-Encoding and Content-Length, or a body whose length differs from Content-Length, throws.
 */
export function rawRequest(url: string, head: string, body = ''): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(Number(port), hostname, () => socket.end(`${head}\r\n\r\n${body}`));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      try {
        resolve(parseAnswer(Buffer.concat(chunks)));
      } catch (error) {
        reject(error);
      }
    });
  });
}

export function parseAnswer(raw: Buffer): RawAnswer {
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) throw new Error(`no complete head in ${JSON.stringify(raw.subarray(0, 200).toString())}`);
  const [statusLine, ...lines] = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine!)?.[1];
  if (!status) throw new Error(`bad status line ${statusLine}`);
  const headers = lines.map((line): [string, string] => {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`bad header line ${line}`);
    return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
  });
  const header = (name: string) => headers.find(([n]) => n === name)?.[1];
  const lengths = headers.filter(([n]) => n === 'content-length');
  if (lengths.length > 0 && header('transfer-encoding') !== undefined)
    throw new Error('both Transfer-Encoding and Content-Length');
  if (lengths.length > 1) throw new Error('Content-Length twice');
  const rest = raw.subarray(end + 4);
  let body: Buffer;
  if (lengths.length === 1) {
    const length = Number(lengths[0]![1]);
    if (rest.length !== length) throw new Error(`Content-Length ${length} but ${rest.length} bytes follow`);
    body = rest;
  } else if (header('transfer-encoding') === 'chunked') {
    body = dechunk(rest);
  } else {
    body = rest;
  }
  const text = body.toString('utf8');
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: Number(status), headers, header, body: text, json, raw };
}

function dechunk(data: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at);
    if (lineEnd === -1) throw new Error('unterminated chunk size');
    const size = Number.parseInt(data.subarray(at, lineEnd).toString(), 16);
    if (!Number.isFinite(size)) throw new Error('bad chunk size');
    if (size === 0) return Buffer.concat(parts);
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

/** The same request through Node's own client, whose parser refuses malformed framing. */
export function strictGet(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { headers, agent: false }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end();
  });
}
