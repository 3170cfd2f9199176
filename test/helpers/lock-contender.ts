import { lockDataDir } from '../../src/db/data-dir-lock.js';

/*
 * One of several processes racing for data folders: `lock-contender.ts <start ms> <slot ms>
 * <kernel|file> <folder>...`. Trial k begins for every contender at start + k * slot; each tries
 * to take folder k, prints `k owner` or `k refused`, and gives the folder up at the end of the slot.
 */
const [start, slot, by, ...folders] = process.argv.slice(2);
for (const [trial, folder] of folders.entries()) {
  const at = Number(start) + trial * Number(slot);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
  try {
    const lock = await lockDataDir(folder!, `contender ${process.pid}`, by as 'kernel' | 'file');
    console.log(`${trial} owner`);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, at + Number(slot) * 0.8 - Date.now())));
    lock.release();
  } catch (error) {
    console.log(`${trial} ${(error as Error).name === 'DataDirInUseError' ? 'refused' : `failed ${(error as Error).message}`}`);
  }
}
