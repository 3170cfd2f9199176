import { InvalidDateFormatError } from '../errors.js';

/*
 * Registration-date bounds of the child list (decisions §4): YYYY-MM-DD means the whole UTC day,
 * ISO 8601 date-times without an offset are UTC, digits only are epoch milliseconds. Impossible
 * dates and other formats are refused with a message that names the parameter.
 */

const DATE_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?$/i;
const DIGITS = /^\d{1,16}$/;
/** Largest instant a JavaScript Date can hold. */
const MAX_TIME = 8.64e15;
const DAY_MS = 86_400_000;

export type DateBound = 'start' | 'end';

function validCalendarDate(year: number, month: number, day: number): boolean {
  if (month < 1 || month > 12 || day < 1) return false;
  return day <= daysInMonth(year, month - 1);
}

const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Days in a month (month 0–11) of a year of the proleptic Gregorian calendar, leap years included. */
export function daysInMonth(year: number, monthIndex: number): number {
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  return monthIndex === 1 && leap ? 29 : MONTH_DAYS[monthIndex]!;
}

/**
 * Milliseconds since the epoch of a UTC calendar time. Not `Date.UTC` alone, which reads the
 * years 0–99 as 1900–1999: the year is set on its own.
 */
function utcMillis(
  year: number,
  monthIndex: number,
  day: number,
  hour = 0,
  minute = 0,
  second = 0,
  millis = 0,
): number {
  const date = new Date(Date.UTC(2000, 0, 1, hour, minute, second, millis));
  date.setUTCFullYear(year, monthIndex, day);
  return date.getTime();
}

export function parseDateBound(name: string, raw: string, bound: DateBound): Date {
  const value = raw.trim();
  const invalid = (why: string) =>
    new InvalidDateFormatError(
      `${name} ${why}: use YYYY-MM-DD, an ISO 8601 date-time, or a timestamp in milliseconds.`,
    );
  if (value === '') throw invalid('is empty');
  if (value.includes('\u0000')) throw invalid('contains NUL or invalid UTF-8');
  if (DIGITS.test(value)) {
    const ms = Number(value);
    if (ms > MAX_TIME) throw invalid('is out of range');
    return new Date(ms);
  }
  const dateOnly = DATE_ONLY.exec(value);
  if (dateOnly) {
    const [year, month, day] = dateOnly.slice(1).map(Number) as [number, number, number];
    if (!validCalendarDate(year, month, day)) throw invalid(`is not a calendar date ("${value}")`);
    const start = utcMillis(year, month - 1, day);
    return new Date(bound === 'start' ? start : start + DAY_MS - 1);
  }
  const dateTime = DATE_TIME.exec(value);
  if (dateTime) {
    const [year, month, day, hour, minute] = dateTime.slice(1, 6).map(Number) as number[];
    const second = Number(dateTime[6] ?? 0);
    if (!validCalendarDate(year!, month!, day!)) throw invalid(`is not a calendar date ("${value}")`);
    if (hour! > 23 || minute! > 59 || second > 59) throw invalid(`has an impossible time ("${value}")`);
    const millis = Number((dateTime[7] ?? '').padEnd(3, '0').slice(0, 3));
    let offsetMinutes = 0;
    const zone = dateTime[8];
    if (zone && zone.toUpperCase() !== 'Z') {
      const sign = zone.startsWith('-') ? -1 : 1;
      const digits = zone.slice(1).replace(':', '');
      const hours = Number(digits.slice(0, 2));
      const minutes = Number(digits.slice(2, 4));
      if (hours > 23 || minutes > 59) throw invalid(`has an impossible offset ("${value}")`);
      offsetMinutes = sign * (hours * 60 + minutes);
    }
    const utc = utcMillis(year!, month! - 1, day!, hour!, minute!, second, millis) - offsetMinutes * 60_000;
    return new Date(utc);
  }
  throw invalid(`is not a valid date ("${value.length > 40 ? `${value.slice(0, 40)}…` : value}")`);
}

export type DateRange = { from?: Date; to?: Date };

/** Both bounds inclusive; a start after the end is refused. */
export function parseDateRange(startDate: string | undefined, endDate: string | undefined): DateRange {
  const from = startDate === undefined ? undefined : parseDateBound('startDate', startDate, 'start');
  const to = endDate === undefined ? undefined : parseDateBound('endDate', endDate, 'end');
  if (from && to && from.getTime() > to.getTime()) {
    throw new InvalidDateFormatError('startDate is after endDate.');
  }
  return { from, to };
}

/** The first instant of the UTC calendar month that contains `now`, or of the month `monthsBefore` months earlier. */
export function monthStart(now: Date, monthsBefore = 0): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - monthsBefore, 1));
}

const MS_PER_DAY = 86_400_000;
const twoDigits = (n: number): string => (n < 10 ? `0${n}` : `${n}`);

/**
 * Epoch milliseconds as an ISO 8601 string in UTC, exactly as `Date.prototype.toISOString` writes
 * it; null stays null (a child never logged in). Every GraphQL answer formats its accounts' times:
 * computed from the day count here (the civil calendar from days since the epoch, H. Hinnant's
 * algorithm), three to four times faster than the engine's own on Node 20 and 24; years outside
 * 1000–9999 (written with a sign or fewer digits) are left to the engine.
 */
export function isoTime(ms: number): string;
export function isoTime(ms: number | null): string | null;
export function isoTime(ms: number | null): string | null {
  if (ms === null) return null;
  const days = Math.floor(ms / MS_PER_DAY);
  const time = ms - days * MS_PER_DAY;
  // Days from 0000-03-01, in 400-year eras of 146,097 days; March first, so that leap days end a year.
  const shifted = days + 719_468;
  const era = Math.floor(shifted / 146_097);
  const dayOfEra = shifted - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365,
  );
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * monthFromMarch + 2) / 5) + 1;
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  // Also NaN and infinities, which the engine refuses (RangeError) as before.
  if (!(year >= 1000 && year <= 9999)) return new Date(ms).toISOString();
  const hours = Math.floor(time / 3_600_000);
  const minutes = Math.floor(time / 60_000) % 60;
  const seconds = Math.floor(time / 1000) % 60;
  const millis = time % 1000;
  const fraction = millis < 10 ? `00${millis}` : millis < 100 ? `0${millis}` : `${millis}`;
  return `${year}-${twoDigits(month)}-${twoDigits(day)}T${twoDigits(hours)}:${twoDigits(minutes)}:${twoDigits(seconds)}.${fraction}Z`;
}
