/** A child counts as active while its last login is at most this old (decisions §4, stats.active). */
export const ACTIVE_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;

/** Whether a last login (epoch ms, or null for never) counts as active at `now`. */
export function activeAt(lastLoginMs: number | null, now: number): boolean {
  return lastLoginMs !== null && lastLoginMs >= now - ACTIVE_WINDOW_MS;
}

/** A last login changed from `before` to `after`, as the active count at `now` sees it. */
export function activityShift(
  before: number | null,
  after: number | null,
  now: number,
): 'none' | 'became active' | 'became inactive' {
  const was = activeAt(before, now);
  const is = activeAt(after, now);
  return was === is ? 'none' : is ? 'became active' : 'became inactive';
}
