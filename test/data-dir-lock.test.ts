import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { baseEnv, run } from './helpers/processes.js';

/**
 * The embedded folder's owner under contention: several processes take the same folder at the
 * same instant, on fresh folders and on folders a dead owner left behind, many times over, with
 * each mechanism (the kernel's, used on Linux; the owner file's, used elsewhere). Every time,
 * exactly one takes it.
 */
describe('the data folder lock under contention', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'lock-race-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  /** The pid of a Node process that has exited: a dead owner. */
  const deadPid = () => spawnSync(process.execPath, ['-e', '']).pid!;

  for (const by of ['kernel', 'file'] as const) {
    it(`by the ${by}: 4 processes at once, 16 trials on fresh and stale folders, one owner each time`, async () => {
      const folders = Array.from({ length: 16 }, (_, trial) => {
        const folder = path.join(root, `${by}-${trial}`);
        mkdirSync(folder);
        // Odd trials: a dead owner's record is there (a crash, kill -9).
        if (trial % 2) writeFileSync(path.join(folder, '.owner'), JSON.stringify({ pid: deadPid(), host: hostname(), what: 'the server', since: new Date().toISOString() }));
        return folder;
      });
      const slot = 250;
      // Late enough for every contender to have started (tsx compiles first).
      const start = Date.now() + 6000;
      const contenders = Array.from({ length: 4 }, () => run('test/helpers/lock-contender.ts', baseEnv({}), [String(start), String(slot), by, ...folders]));
      const exits = await Promise.all(contenders.map((c) => c.exited));
      expect(exits.map((e) => e.code)).toEqual([0, 0, 0, 0]);
      const lines = contenders.flatMap((c) => c.output().trim().split('\n'));
      expect(lines.filter((line) => !/^\d+ (owner|refused)$/.test(line)), lines.join('\n')).toEqual([]);
      for (let trial = 0; trial < folders.length; trial++) {
        const owners = lines.filter((line) => line === `${trial} owner`).length;
        expect(owners, `trial ${trial}${trial % 2 ? ' (stale)' : ' (fresh)'}: ${owners} owners`).toBe(1);
      }
    }, 60_000);
  }
});
