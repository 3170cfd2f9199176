// The sign-in service, as it writes: for a random child, its counters and last login, its
// parent's organization-wide counters, the organization's balance (credits spent) and this
// month's usage row, in one transaction, SIGNINS_PER_SECOND times a second.
import { readFileSync } from 'node:fs';
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
while (!stopping) {
  // Paced to the rate over the whole run, not per write: a slow write is caught up after.
  const due = Math.floor(((Date.now() - started) / 1000) * rate);
  while (written < due && !stopping) {
    await client.query(signIn, [ids[Math.floor(Math.random() * ids.length)]]);
    written += 1;
  }
  await new Promise((resolve) => setTimeout(resolve, 5));
}
await client.end();
process.stderr.write(`${JSON.stringify({ written, seconds: (Date.now() - started) / 1000 })}\n`);
