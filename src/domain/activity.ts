/** A child counts as active while its last login is at most this old (decisions §4, stats.active). */
export const ACTIVE_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;

/** Whether a last login (epoch ms, or null for never) counts as active at `now`. */
export function activeAt(lastLoginMs: number | null, now: number): boolean {
  return lastLoginMs !== null && lastLoginMs >= now - ACTIVE_WINDOW_MS;
}
