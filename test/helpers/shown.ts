import { expect } from 'vitest';

/*
 * A change made outside the server, waited for until its answers show it. How soon it shows is a
 * benchmark figure (`npm run bench:writes` prints the staleness after COMMIT), not an assertion.
 */

/**
 * Until `shows` holds for an answer of `ask`, polled as fast as the server answers. Fails after
 * `noHangMs` (30 s by default): a bound that only proves the wait ends, at least 10x what a
 * change takes to show on an idle machine (tens of milliseconds; a few seconds where a test
 * stalls the stream).
 */
export async function shown(
  ask: () => Promise<{ status: number; body: any }>,
  shows: (r: { status: number; body: any }) => boolean,
  noHangMs = 30_000,
): Promise<void> {
  const started = performance.now();
  for (;;) {
    const answer = await ask();
    if (shows(answer)) return;
    if (performance.now() - started > noHangMs) expect.fail(`never shown: ${JSON.stringify(answer.body)}`);
  }
}
