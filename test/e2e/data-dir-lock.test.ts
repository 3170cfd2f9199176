import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { baseEnv, printed, run } from '../helpers/processes.js';

/**
 * The embedded folder's owner under contention: several processes are told to take the same folder at
 * once (a line on each one's stdin), on fresh folders and on folders a dead owner left behind, many times over, with
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
        if (trial % 2)
          writeFileSync(
            path.join(folder, '.owner'),
            JSON.stringify({ pid: deadPid(), host: hostname(), what: 'the server', since: new Date().toISOString() }),
          );
        return folder;
      });
      const contenders = Array.from({ length: 4 }, () =>
        run('test/helpers/lock-contender.mjs', baseEnv({}), [by], { stdin: true }),
      );
      try {
        // Each contender's next line, once it has printed it.
        const seen = contenders.map(() => 0);
        const next = (index: number) =>
          printed(contenders[index]!, new RegExp(`^(?:[^\\n]*\\n){${seen[index]!}}([^\\n]*)\\n`)).then((line) => {
            seen[index]! += 1;
            return line;
          });
        const all = () => Promise.all(contenders.map((_, index) => next(index)));
        expect(await all()).toEqual(['ready', 'ready', 'ready', 'ready']);
        for (const [trial, folder] of folders.entries()) {
          for (const contender of contenders) contender.child.stdin!.write(`take ${folder}\n`);
          const verdicts = await all();
          expect(
            verdicts.filter((line) => !/^(owner|refused)$/.test(line)),
            verdicts.join('\n'),
          ).toEqual([]);
          const owners = verdicts.filter((line) => line === 'owner').length;
          expect(owners, `trial ${trial}${trial % 2 ? ' (stale)' : ' (fresh)'}: ${owners} owners`).toBe(1);
          for (const contender of contenders) contender.child.stdin!.write('release\n');
          expect(await all()).toEqual(['released', 'released', 'released', 'released']);
        }
        for (const contender of contenders) contender.child.stdin!.end();
        expect((await Promise.all(contenders.map((c) => c.exited))).map((e) => e.code)).toEqual([0, 0, 0, 0]);
      } finally {
        for (const contender of contenders) contender.child.kill('SIGKILL');
      }
    }, 60_000);
  }
});
