// The commands run from the build (dist/), as the server does: this builds first only when a
// source has changed since the last build, so that a command starts in a few hundred
// milliseconds instead of compiling TypeScript on every call. What a build prints goes to stderr:
// stdout is the command's own (a token, a schema).
//   node src/cli/ensure-built.mjs          build if stale
//   node src/cli/ensure-built.mjs --stamp  record that the build is current (the build script's last step)
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..', '..');
const stamp = path.join(root, 'dist', '.built');

if (process.argv.includes('--stamp')) {
  writeFileSync(stamp, `${new Date().toISOString()}\n`);
  process.exit(0);
}

const mtime = (file) => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
};

/** The newest change among the files the build reads (the generated client is its output). */
function newestSource() {
  let newest = Math.max(
    ...['tsconfig.json', 'package.json', 'package-lock.json', 'prisma/schema.prisma'].map(
      (f) => mtime(path.join(root, f)) ?? 0,
    ),
  );
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (full !== path.join(root, 'src', 'generated')) walk(full);
      } else if (/\.(ts|json|mjs)$/.test(entry.name)) {
        newest = Math.max(newest, mtime(full) ?? 0);
      }
    }
  };
  walk(path.join(root, 'src'));
  return newest;
}

const built = mtime(stamp);
if (built === undefined || newestSource() > built) {
  const result = spawnSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: ['ignore', 2, 'inherit'] });
  if (result.status !== 0) {
    console.error('the build failed; the command was not run');
    process.exit(result.status ?? 1);
  }
}
