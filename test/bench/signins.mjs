// The sign-in service, as it writes: for a random child, its counters and last login, its
// parent's organization-wide counters, the organization's balance (credits spent) and this
// month's usage row, in one transaction, SIGNINS_PER_SECOND times a second.
// A line "pause" on its standard input pauses it, "resume" resumes it, paced from then on (the
// benchmark's floor slices are measured without it).
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import pg from 'pg';

const ids = readFileSync(process.env.CHILD_IDS_FILE, 'utf8').split('\n').filter(Boolean);
const rate = Number(process.env.SIGNINS_PER_SECOND);
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
const signIn = `WITH child AS (
    UPDATE "Account" SET "signInCount" = "signInCount" + 1, "lastLogin" = now(), "lastLoginProvider" = 'email', "updatedAt" = now()
    WHERE id = $1 RETURNING "parentId"),
  parent AS (
    UPDATE "Account" SET "signInCount" = "signInCount" + 1, "updatedAt" = now()
    WHERE id = (SELECT "parentId" FROM child) RETURNING id),
  spent AS (
    UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1, "updatedAt" = now()
    WHERE "parentId" = (SELECT id FROM parent) RETURNING "parentId")
  INSERT INTO "MonthlyUsage" ("organizationId", month, "signIns")
  SELECT "parentId", date_trunc('month', now() AT TIME ZONE 'UTC'), 1 FROM spent
  ON CONFLICT ("organizationId", month) DO UPDATE SET "signIns" = "MonthlyUsage"."signIns" + 1`;
let written = 0;
let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});
const started = Date.now();
// Paced from `since` (the start, or the last resumption), when `writtenBefore` were written.
let [since, writtenBefore] = [started, 0];
// Paused since `pausedAt`; `pausedMs` in the pauses that ended.
let [paused, pausedAt, pausedMs] = [false, 0, 0];
const commands = createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'pause' && !paused) [paused, pausedAt] = [true, Date.now()];
  if (line === 'resume' && paused)
    [paused, pausedMs, since, writtenBefore] = [false, pausedMs + Date.now() - pausedAt, Date.now(), written];
});
while (!stopping) {
  // Paced to the rate since then, not per write: a slow write is caught up after.
  const due = writtenBefore + Math.floor(((Date.now() - since) / 1000) * rate);
  while (written < due && !stopping && !paused) {
    await client.query(signIn, [ids[Math.floor(Math.random() * ids.length)]]);
    written += 1;
  }
  await new Promise((resolve) => setTimeout(resolve, 5));
}
await client.end();
commands.close();
process.stdin.destroy();
// The seconds it wrote in, its pauses left out.
process.stderr.write(
  `${JSON.stringify({ written, seconds: (Date.now() - started - pausedMs - (paused ? Date.now() - pausedAt : 0)) / 1000 })}\n`,
);
