/** Bytes that an opaque object (a WebCrypto key) is counted as. */
const OPAQUE_BYTES = 256;

/** Strings V8 holds at one byte a character (Latin-1 only). */
const ONE_BYTE = /^[\u0000-\u00ff]*$/;

/**
 * An estimate of the heap a cached value holds, from V8's layout on 64 bits: strings at their
 * header plus one byte a character (two outside Latin-1), numbers beyond a small integer at a
 * boxed double, dates at 96, objects and arrays at a header plus a slot per member. Rounded up
 * rather than down, so that the configured byte bound is an upper bound in practice (the cache's
 * memory test holds it to the heap measured for cached users).
 */
export function estimateBytes(value: unknown, depth = 0): number {
  switch (typeof value) {
    case 'string':
      return 16 + 8 * Math.ceil((ONE_BYTE.test(value) ? value.length : 2 * value.length) / 8);
    case 'number':
      return Number.isInteger(value) && Math.abs(value) < 2 ** 31 ? 8 : 16;
    case 'boolean':
    case 'bigint':
      return 8;
    case 'object': {
      if (value === null) return 8;
      if (value instanceof Date) return 96;
      if (ArrayBuffer.isView(value)) return 64 + value.byteLength;
      if (depth > 6) return OPAQUE_BYTES;
      const prototype = Object.getPrototypeOf(value) as unknown;
      if (!Array.isArray(value) && prototype !== Object.prototype && prototype !== null && !('toNumber' in (value as object))) {
        return OPAQUE_BYTES;
      }
      let bytes = 32;
      if (Array.isArray(value)) for (const item of value) bytes += 8 + estimateBytes(item, depth + 1);
      // Property names live in the shape V8 shares between objects of one layout (rows alike).
      else for (const member of Object.values(value)) bytes += 8 + estimateBytes(member, depth + 1);
      return bytes;
    }
    default:
      return 8;
  }
}
