import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor } from '../helpers/builders.js';
import { startServer, type TestServer } from '../helpers/app.js';
import { testMode, useTestDatabase } from '../helpers/database.js';

/*
 * GraphiQL in a real browser (Debian's Chromium, driven by playwright-core with the system
 * browser; nothing is downloaded): it runs the stored live subscription, a sign-in is written to
 * the database, and the page shows the pushed update. A screenshot is kept in test/artifacts/.
 * Skipped with a warning when Chromium is absent; a failure under CI=true.
 */
function chromiumBinary(): string | undefined {
  for (const candidate of ['/usr/bin/chromium', '/usr/bin/chromium-browser'])
    if (existsSync(candidate)) return candidate;
  const found = spawnSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' });
  return found.status === 0 && found.stdout.trim() ? found.stdout.trim() : undefined;
}

const executable = chromiumBinary();
const inCi = process.env.CI === 'true' || process.env.CI === '1';
if (!executable && !inCi)
  console.warn('browser-graphiql: no Chromium on this machine; its test is skipped (apt-get install chromium)');
export const ARTIFACTS = path.resolve(import.meta.dirname, '..', 'artifacts');

describe.skipIf(!executable && !inCi)(`GraphiQL in a browser (${testMode})`, () => {
  const database = useTestDatabase();
  let browser: Browser | undefined;
  let server: TestServer | undefined;

  beforeAll(async () => {
    if (!executable) throw new Error('CI=true and no Chromium: .ci/run installs chromium');
    browser = await chromium.launch({ executablePath: executable, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it('runs the live subscription and shows the update a sign-in pushes', async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    const token = await tokenFor(built.parent, built, { ttlSeconds: 600 });
    // Development: GraphiQL's headers tab holds the token, as `npm start` has it.
    server = await startServer(database(), {
      env: { NODE_ENV: 'development', LIVE_MIN_INTERVAL_MS: '200' },
      graphiqlHeaders: JSON.stringify({ Authorization: `Bearer ${token}` }),
    });
    const page = await browser!.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(`${server.url}/graphql`);
    await page.locator('.graphiql-execute-button').waitFor({ timeout: 30_000 });
    // Several operations: the run button offers them; choose the live one.
    await page.locator('.graphiql-execute-button').click();
    await page.getByRole('menuitem', { name: 'CreditAnalysisLive' }).click();
    const response = page.locator('.graphiql-response, .result-window').first();
    const balance = built.organization.creditBalance;
    const shown = async () => ((await response.textContent()) ?? '').replace(/\s+/g, '');
    await expect.poll(shown, { timeout: 20_000 }).toContain(`"creditBalance":${balance},`);
    await database().sql.query(SIGN_IN_SQL, [child.id]);
    await expect.poll(shown, { timeout: 20_000 }).toContain(`"creditBalance":${balance - 1},`);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, `graphiql-live-${testMode}.png`), fullPage: false });
    await page.close();
  });
});
