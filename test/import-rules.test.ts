import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './helpers/processes.js';

/*
 * The house's layers, read from the imports (see `src/README.md`): the edge (http/) calls the
 * transports (rest/, graphql/), which call the services, which call the domain and the database.
 * An arrow the other way fails here, naming the file and what it imports.
 */

const src = path.join(root, 'src');

/** Every TypeScript file of ours under src/ (not the generated database client), relative to src/. */
function sources(folder = src): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) return entry.name === 'generated' ? [] : sources(full);
    return entry.name.endsWith('.ts') ? [path.relative(src, full)] : [];
  });
}

/** What a file imports of ours (static, dynamic and re-exports), as paths relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(path.join(src, file), 'utf8');
  const specifiers = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm)].map(
    (match) => match[1]!,
  );
  return specifiers
    .filter((specifier) => specifier.startsWith('.'))
    .map((specifier) =>
      path.relative(src, path.resolve(path.dirname(path.join(src, file)), specifier)).replace(/\.js$/, '.ts'),
    );
}

const area = (file: string) => (file.includes(path.sep) ? file.split(path.sep)[0]! : file);
const TRANSPORTS = new Set(['rest', 'graphql']);
/** What a transport may use of the edge: the exchange it receives. */
const EDGE_OFFERS = new Set(['http/exchange.ts']);

type Rule = { name: string; broken: (file: string, imported: string) => boolean };
const RULES: Rule[] = [
  {
    name: 'a transport imports neither the other transport nor the edge (only the exchange it receives)',
    broken: (file, imported) =>
      TRANSPORTS.has(area(file)) &&
      ((TRANSPORTS.has(area(imported)) && area(imported) !== area(file)) ||
        (area(imported) === 'http' && !EDGE_OFFERS.has(imported))),
  },
  {
    name: 'db/ imports neither auth/, services/ nor a transport or the edge',
    broken: (file, imported) =>
      area(file) === 'db' && ['auth', 'services', 'rest', 'graphql', 'http'].includes(area(imported)),
  },
  // The errors are the one vocabulary every layer throws in; they import nothing themselves.
  {
    name: 'domain/ imports nothing of ours outside domain/ but the errors',
    broken: (file, imported) => area(file) === 'domain' && area(imported) !== 'domain' && imported !== 'errors.ts',
  },
  { name: 'the errors import nothing of ours', broken: (file) => file === 'errors.ts' },
];

describe('the import rules', () => {
  const files = sources();

  it('reads the sources and their imports', () => {
    expect(files.length).toBeGreaterThan(50);
    expect(importsOf(path.join('http', 'app.ts'))).toContain(path.join('http', 'exchange.ts'));
  });

  for (const rule of RULES) {
    it(rule.name, () => {
      const broken = files.flatMap((file) =>
        importsOf(file)
          .filter((imported) => rule.broken(file, imported))
          .map((imported) => `${file} imports ${imported}`),
      );
      expect(broken).toEqual([]);
    });
  }

  // Type-only imports too: a circle blurs which room is below which, and a type shared by two
  // files belongs in a room below both.
  it('no file reaches itself through its imports', () => {
    const graph = new Map(files.map((file) => [file, importsOf(file).filter((imported) => imported !== file)]));
    const circles = new Set<string>();
    const state = new Map<string, 'open' | 'done'>();
    const walk = (file: string, trail: string[]) => {
      state.set(file, 'open');
      for (const next of graph.get(file) ?? []) {
        if (state.get(next) === 'open') circles.add([...trail.slice(trail.indexOf(next)), next].join(' -> '));
        else if (!state.has(next)) walk(next, [...trail, next]);
      }
      state.set(file, 'done');
    };
    for (const file of files) if (!state.has(file)) walk(file, [file]);
    expect([...circles]).toEqual([]);
  });
});
