import { expect } from 'vitest';

/* How soon a change made outside the server shows in its answers: what the staleness tests time. */

const ms = (since: number) => performance.now() - since;

/** Until `shows` holds for an answer of `ask`, polled as fast as the server answers: the time it took. */
export async function shownWithin(ask: () => Promise<{ status: number; body: any }>, shows: (r: { status: number; body: any }) => boolean, limitMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    const answer = await ask();
    if (shows(answer)) return ms(started);
    if (ms(started) > limitMs * 20) expect.fail(`never shown: ${JSON.stringify(answer.body)}`);
  }
}
