import { promisify } from 'node:util';
import { gzip } from 'node:zlib';

/** Whether an Accept-Encoding value accepts gzip (named, or `*`, without q=0). */
export function acceptsGzip(acceptEncoding: string | undefined): boolean {
  if (!acceptEncoding) return false;
  return acceptEncoding.split(',').some((item) => {
    const [coding = '', ...parameters] = item.trim().toLowerCase().split(';');
    if (coding.trim() !== 'gzip' && coding.trim() !== '*') return false;
    const q = parameters.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

const gzipAsync = promisify(gzip);

/**
 * A fixed payload (a page, a script), gzipped once off the event loop on first demand and kept
 * with the exact bytes it compresses.
 */
export class CompressedPayload {
  #gzip: Promise<Buffer> | undefined;
  constructor(readonly raw: Buffer) {}

  gzip(): Promise<Buffer> {
    return (this.#gzip ??= gzipAsync(this.raw, { level: 6 }));
  }
}
