import { createInterface } from 'node:readline';
import { lockDataDir } from '../../dist/db/data-dir-lock.js';

/*
 * One of several processes racing for data folders: `lock-contender.mjs <kernel|file>`, driven by
 * its stdin. `take <folder>` tries to take the folder and prints `owner` or `refused`; `release`
 * gives up what it holds and prints `released`. It prints `ready` first. The test sends the same
 * `take` to every contender at once, so that each trial is a race.
 */
const by = process.argv[2];
let held;
const lines = createInterface({ input: process.stdin });
console.log('ready');
for await (const line of lines) {
  const [command, folder] = line.split(' ');
  if (command === 'take') {
    try {
      held = await lockDataDir(folder, `contender ${process.pid}`, by);
      console.log('owner');
    } catch (error) {
      console.log(error.name === 'DataDirInUseError' ? 'refused' : `failed ${error.message}`);
    }
  } else if (command === 'release') {
    held?.release();
    held = undefined;
    console.log('released');
  }
}
