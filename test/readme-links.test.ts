import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './helpers/processes.js';

/*
 * The documentation's relative links: every README in the repository, every link to a file or a
 * folder of the repository resolves, and every `#fragment` names a heading of the file it points
 * to (as GitHub makes heading anchors). The README itself stays short enough to read.
 */

const SKIP = new Set(['node_modules', '.git', 'dist', 'data', 'generated', '.bench', '.node24', 'artifacts']);

function readmes(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...readmes(full));
    else if (entry.name === 'README.md') found.push(full);
  }
  return found;
}

/** Markdown text outside fenced code blocks. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[`*_]/g, '')
    .replace(/[^\p{L}\p{N} -]/gu, '')
    .replace(/ /g, '-');
}

function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const match of prose(readFileSync(file, 'utf8')).matchAll(/^#{1,6} (.+)$/gm)) {
    const base = anchor(match[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    result.add(count === 0 ? base : `${base}-${count}`);
  }
  return result;
}

describe('the documentation', () => {
  const files = readmes(root);

  it('has a README in the repository root, in test/ and in every folder of src/ but the generated one', () => {
    expect(files).toContain(path.join(root, 'README.md'));
    expect(files).toContain(path.join(root, 'test', 'README.md'));
    for (const entry of readdirSync(path.join(root, 'src'), { withFileTypes: true })) {
      if (entry.isDirectory() && entry.name !== 'generated')
        expect(files, entry.name).toContain(path.join(root, 'src', entry.name, 'README.md'));
    }
  });

  it('every relative link in every README resolves, fragments included', () => {
    const broken: string[] = [];
    for (const file of files) {
      for (const match of prose(readFileSync(file, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = match[1]!;
        if (/^[a-z]+:/i.test(target)) continue;
        const [pathPart, fragment] = target.split('#') as [string, string | undefined];
        const resolved = pathPart === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(pathPart));
        const where = `${path.relative(root, file)}: ${target}`;
        if (!existsSync(resolved)) {
          broken.push(`${where} (no such file)`);
          continue;
        }
        if (
          fragment !== undefined &&
          statSync(resolved).isFile() &&
          resolved.endsWith('.md') &&
          !anchors(resolved).has(fragment)
        ) {
          broken.push(`${where} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('the README is read in ten minutes: at most 20,000 bytes, in the order a newcomer needs', () => {
    const text = readFileSync(path.join(root, 'README.md'), 'utf8');
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(20_000);
    const order = [
      'Two commands',
      'A five-minute tour',
      'The API at a glance',
      'The settings people change',
      'Production and several instances',
      'Code layout',
      'Tests',
      'Results',
    ];
    const headings = [...prose(text).matchAll(/^## (.+)$/gm)].map((m) => m[1]!);
    expect(headings.filter((heading) => order.includes(heading))).toEqual(order);
    // The layout names every folder of src/.
    for (const entry of readdirSync(path.join(root, 'src'), { withFileTypes: true })) {
      if (entry.isDirectory()) expect(text, entry.name).toContain(`src/${entry.name}/`);
    }
  });
});
