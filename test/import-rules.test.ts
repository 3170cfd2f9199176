import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './helpers/processes.js';

/*
 * The house's layers, read from the imports (see `src/README.md`): the edge (http/) calls the
 * transports (rest/, graphql/), which call the services, which call the domain and the database.
 * An arrow the other way fails here, naming the file and what it imports; so does a circle, of
 * files or of folders.
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

/**
 * What a file imports of ours (static, dynamic and re-exports), as paths relative to src/; with
 * `values`, only what brings a value (not `import type`, nor braces of `type` names alone).
 */
function importsOf(file: string, { values = false } = {}): string[] {
  const text = readFileSync(path.join(src, file), 'utf8');
  const statements = [
    ...text.matchAll(/(?:^\s*(import|export)\b([^;]*?)\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm),
  ];
  return statements
    .filter(([, , clause = '', specifier]) => specifier!.startsWith('.') && (!values || bringsValue(clause)))
    .map(([, , , specifier]) =>
      path.relative(src, path.resolve(path.dirname(path.join(src, file)), specifier!)).replace(/\.js$/, '.ts'),
    );
}

/** Whether an import's clause (between `import` and `from`) names a value. */
function bringsValue(clause: string): boolean {
  const text = clause.trim();
  if (text.startsWith('type ')) return false;
  const braces = /^\{([^}]*)\}$/s.exec(text);
  if (!braces) return true;
  const names = braces[1]!
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  return names.some((name) => !name.startsWith('type '));
}

/** The cycles of a graph, each as the path that closes it. */
function cycles(graph: Map<string, string[]>): string[] {
  const found = new Set<string>();
  const state = new Map<string, 'open' | 'done'>();
  const walk = (node: string, trail: string[]) => {
    state.set(node, 'open');
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') found.add([...trail.slice(trail.indexOf(next)), next].join(' -> '));
      else if (!state.has(next)) walk(next, [...trail, next]);
    }
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) walk(node, [node]);
  return [...found];
}

const area = (file: string) => (file.includes(path.sep) ? file.split(path.sep)[0]! : file);
const TRANSPORTS = new Set(['rest', 'graphql']);

type Rule = { name: string; broken: (file: string, imported: string) => boolean };
const RULES: Rule[] = [
  {
    name: 'a transport imports neither the other transport nor the edge (the exchange it receives is below both)',
    broken: (file, imported) =>
      TRANSPORTS.has(area(file)) &&
      ((TRANSPORTS.has(area(imported)) && area(imported) !== area(file)) || area(imported) === 'http'),
  },
  {
    name: 'a transport reaches the data through the services alone: it imports nothing of db/',
    broken: (file, imported) => TRANSPORTS.has(area(file)) && area(imported) === 'db',
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
  {
    name: "auth/ knows no cache's storage format (the records' text, the ring)",
    broken: (file, imported) =>
      area(file) === 'auth' &&
      [path.join('db', 'compact-text.ts'), path.join('db', 'record-ring.ts')].includes(imported),
  },
  {
    name: 'main.ts starts the edge, and reaches no transport',
    broken: (file, imported) => file === 'main.ts' && TRANSPORTS.has(area(imported)),
  },
];

describe('the import rules', () => {
  const files = sources();

  it('reads the sources and their imports', () => {
    expect(files.length).toBeGreaterThan(50);
    expect(importsOf(path.join('http', 'app.ts'))).toContain('exchange.ts');
    // A value import counts as one; `import type` and braces of types alone do not.
    expect(importsOf(path.join('http', 'app.ts'), { values: true })).toContain('exchange.ts');
    expect(importsOf(path.join('http', 'app.ts'), { values: true })).not.toContain(path.join('graphql', 'yoga.ts'));
    expect(bringsValue('{ type A, type B }')).toBe(false);
    expect(bringsValue('{ A, type B }')).toBe(true);
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
    expect(cycles(graph)).toEqual([]);
  });

  // Folders by the values they take from each other (a type names a shape, not a dependency at
  // run time); a file at the top of src/ is a room of its own.
  it('no folder reaches itself through the values it imports', () => {
    const graph = new Map<string, string[]>();
    for (const file of files) {
      const from = area(file);
      const to = importsOf(file, { values: true })
        .map(area)
        .filter((imported) => imported !== from);
      graph.set(from, [...new Set([...(graph.get(from) ?? []), ...to])]);
    }
    expect(cycles(graph)).toEqual([]);
  });

  it('finds a circle when there is one', () => {
    expect(
      cycles(
        new Map([
          ['db', ['ops']],
          ['ops', ['db']],
          ['http', ['db']],
        ]),
      ),
    ).toEqual(['db -> ops -> db']);
  });
});
