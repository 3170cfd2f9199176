import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { baseEnv, listening, root, run } from '../helpers/processes.js';

/*
 * The Node.js release the suite runs on. CI runs the suite on the machine's Node and again on
 * Node 26 and 24 (`.ci/run`, EXPECT_NODE_MAJOR); this proves that a pass ran where it says, and that the
 * server and the CLI it starts run there too (they are started with the test's own binary).
 */
describe('the Node.js release', () => {
  const folders: string[] = [];
  afterAll(() => {
    for (const dir of folders) rmSync(dir, { recursive: true, force: true });
  });

  it('is the one the pass asked for (EXPECT_NODE_MAJOR), and one that package.json says is tested', () => {
    const major = process.versions.node.split('.')[0]!;
    const expected = process.env['EXPECT_NODE_MAJOR'];
    if (expected) expect(process.version).toMatch(new RegExp(`^v${expected}\\.`));
    const engines = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } })
      .engines.node;
    expect(engines.split('||').map((range) => range.trim().replace(/^\^/, '').split('.')[0])).toContain(major);
  });

  it('runs the server and the CLI', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'runtime-'));
    folders.push(dataDir);
    const server = run('dist/main.js', baseEnv({ DATA_DIR: dataDir }));
    try {
      const url = await listening(server);
      // prom-client's default metrics name the release the process runs on.
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(/^nodejs_version_info\{version="(v[^"]+)"/m.exec(metrics)?.[1]).toBe(process.version);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    const cli = run('dist/cli/token.js', baseEnv({ DATA_DIR: dataDir }), ['--list']);
    const exit = await cli.exited;
    expect(exit.code, cli.output()).toBe(0);
  }, 60_000);
});
