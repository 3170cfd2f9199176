/** Bytes that an opaque object (a WebCrypto key) is counted as. */
const OPAQUE_BYTES = 256;

/** Strings V8 holds at one byte a character (Latin-1 only). */
const ONE_BYTE = /^[\u0000-\u00ff]*$/;

/**
 * The heap a cached value holds, from V8's 64-bit layout, rounded up so the byte bound holds in
 * practice (`npm run bench:cache-memory` checks it against the heap measured).
 */
export function estimateBytes(value: unknown, depth = 0): number {
  switch (typeof value) {
    case 'string':
      return 16 + 8 * Math.ceil((ONE_BYTE.test(value) ? value.length : 2 * value.length) / 8);
    case 'number':
      return Number.isInteger(value) && Math.abs(value) < 2 ** 30 ? 0 : 16;
    case 'bigint':
      return 16;
    case 'object': {
      if (value === null) return 0;
      if (value instanceof Date) return 96;
      if (ArrayBuffer.isView(value)) return 64 + value.byteLength;
      if (depth > 6) return OPAQUE_BYTES;
      const prototype = Object.getPrototypeOf(value) as unknown;
      if (
        !Array.isArray(value) &&
        prototype !== Object.prototype &&
        prototype !== null &&
        !('toNumber' in (value as object))
      ) {
        return OPAQUE_BYTES;
      }
      let bytes = 32;
      if (Array.isArray(value)) for (const item of value) bytes += 8 + estimateBytes(item, depth + 1);
      // Property names live in the shape V8 shares between objects of one layout (rows alike).
      else for (const member of Object.values(value)) bytes += 8 + estimateBytes(member, depth + 1);
      return bytes;
    }
    default:
      // A boolean, undefined: held in the slot.
      return 0;
  }
}
