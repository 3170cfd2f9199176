/**
 * The record ring's texts: values joined by NUL (which PostgreSQL text cannot hold), numbers in base 36, enums by
 * place.
 */

/** Between the values of a record's text. */
export const FIELD = '\0';

/** A value written as itself (what is not a safe integer, or not in its enum's list) starts with this. */
const AS_IS = '~';

/** A number in base 36 when a safe integer, else as written (null: empty). */
export function numberText(value: number | null | undefined): string {
  if (value === null || value === undefined) return '';
  return Number.isSafeInteger(value) ? value.toString(36) : AS_IS + String(value);
}

/** `numberText` read back (empty: null). */
export function numberOf(text: string): number | null {
  if (text === '') return null;
  return text.charCodeAt(0) === 126 ? Number(text.slice(1)) : parseInt(text, 36);
}

/** A date as `numberText` of its epoch milliseconds. */
export const dateText = (date: Date | null): string => numberText(date === null ? null : date.getTime());

/** `dateText` read back. */
export function dateOf(text: string): Date | null {
  const time = numberOf(text);
  return time === null ? null : new Date(time);
}

/** A value of an enum type by its place in `values` (as itself if it is not one of them). */
export function enumText<T extends string>(value: T, values: readonly T[]): string {
  const at = values.indexOf(value);
  return at === -1 ? AS_IS + value : String(at);
}

/** `enumText` read back. */
export function enumOf<T extends string>(text: string, values: readonly T[]): T {
  return text.charCodeAt(0) === 126 ? (text.slice(1) as T) : values[Number(text)]!;
}

/** A nullable text: null empty, a text (even an empty one) after a mark. */
export const optionalText = (value: string | null): string => (value === null ? '' : AS_IS + value);

/** `optionalText` read back. */
export const optionalOf = (text: string): string | null => (text === '' ? null : text.slice(1));

/** An enum type's values in a fixed order; every value must be named. */
export const enumValues = <T extends string>(named: Record<T, number>): readonly T[] =>
  (Object.keys(named) as T[]).sort((a, b) => named[a] - named[b]);
