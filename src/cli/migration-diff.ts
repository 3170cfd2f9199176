import { helpIfAsked } from './help.js';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * Compares prisma/migrations with prisma/schema.prisma using Prisma Migrate's own diff engine,
 * offline. Prisma 7's CLI needs a native schema engine that is not on the npm registry; Prisma
 * 6.19's CLI (installed as the `prisma-v6` alias) carries the engine as WebAssembly and runs it
 * over a driver adapter. Here that adapter is an in-memory PGlite, which also serves as the
 * shadow database the migrations are replayed into.
 *
 *   check        exit 0 when the migrations produce exactly the schema, 1 (printing the SQL
 *                that is missing) when they drift
 *   new <name>   write the missing SQL as prisma/migrations/<timestamp>_<name>/migration.sql
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const schemaFile = path.join(root, 'prisma', 'schema.prisma');
const migrationsDir = path.join(root, 'prisma', 'migrations');

/** The Prisma 7 schema, rewritten for the Prisma 6 CLI (which wants a url and its own generator). */
function schemaForPrisma6(schema: string): string {
  return schema
    .replace(/generator\s+\w+\s*\{[^}]*\}/g, 'generator client {\n  provider = "prisma-client-js"\n}')
    .replace(
      /(datasource\s+\w+\s*\{[^}]*provider\s*=\s*"postgresql")/,
      '$1\n  url = "postgresql://offline@localhost/offline"',
    );
}

function configSource(): string {
  const resolve = (specifier: string) => JSON.stringify(import.meta.resolve(specifier));
  return `import { PGlite } from ${resolve('@electric-sql/pglite')};
import { pg_trgm } from ${resolve('@electric-sql/pglite/contrib/pg_trgm')};
import { btree_gin } from ${resolve('@electric-sql/pglite/contrib/btree_gin')};
import { PrismaPGlite } from ${resolve('pglite-prisma-adapter')};
// The adapter's executeScript does not wait for PGlite; migration scripts need it to.
async function connect() {
  const pglite = new PGlite({ extensions: { pg_trgm, btree_gin } });
  const adapter = await new PrismaPGlite(pglite).connect();
  const executeRaw = adapter.executeRaw.bind(adapter);
  adapter.executeScript = async (script) => { await pglite.exec(script); };
  adapter.executeRaw = async (query) => {
    if (query.args.length === 0 && query.sql.includes(';')) { await pglite.exec(query.sql); return 0; }
    return executeRaw(query);
  };
  return adapter;
}
export default {
  engine: 'js',
  experimental: { adapter: true },
  adapter: async () => ({ provider: 'postgres', adapterName: '@prisma/adapter-pglite', connect, connectToShadowDb: connect }),
};
`;
}

export type DiffResult = { drift: boolean; sql: string };

/**
 * Indexes the migrations make that schema.prisma cannot declare: the child search's trigram and
 * grams indexes that hold the parent (`"parentId" text_ops`, btree_gin's operator class, which
 * Prisma neither accepts nor reads back; the grams index is on an expression besides). The diff's only
 * complaint about them is that the schema lacks
 * them; that complaint is left out, and any other stays drift.
 */
export const KEPT_OUTSIDE_THE_SCHEMA = [
  'Account_parentId_username_trgm_idx',
  'Account_parentId_email_trgm_idx',
  'Account_parentId_search_grams_idx',
];

/** The diff's statements without the drops of `KEPT_OUTSIDE_THE_SCHEMA`. */
function withoutKeptIndexes(sql: string): string {
  return sql
    .split(/\n\s*\n/)
    .filter(
      (statement) =>
        !KEPT_OUTSIDE_THE_SCHEMA.some((name) => statement.trim() === `-- DropIndex\nDROP INDEX "${name}";`),
    )
    .join('\n\n')
    .trim();
}

export function diffMigrationsToSchema(options: { schema?: string; migrations?: string } = {}): DiffResult {
  const work = mkdtempSync(path.join(tmpdir(), 'migration-diff-'));
  try {
    const schema = path.join(work, 'schema.prisma');
    const config = path.join(work, 'prisma.config.mjs');
    writeFileSync(schema, schemaForPrisma6(options.schema ?? readFileSync(schemaFile, 'utf8')));
    writeFileSync(config, configSource());
    const cli = fileURLToPath(import.meta.resolve('prisma-v6/build/index.js'));
    const result = spawnSync(
      process.execPath,
      [
        cli,
        'migrate',
        'diff',
        '--config',
        config,
        '--from-migrations',
        options.migrations ?? migrationsDir,
        '--to-schema-datamodel',
        schema,
        '--script',
        '--exit-code',
      ],
      {
        encoding: 'utf8',
        cwd: work,
        env: {
          ...process.env,
          // Present but never executed: the js engine does the work.
          PRISMA_SCHEMA_ENGINE_BINARY: cli,
          PRISMA_QUERY_ENGINE_LIBRARY: cli,
          PRISMA_HIDE_UPDATE_MESSAGE: '1',
          CHECKPOINT_DISABLE: '1',
        },
      },
    );
    if (result.status === 0) return { drift: false, sql: '' };
    if (result.status === 2) {
      const sql = withoutKeptIndexes(result.stdout.trim());
      return { drift: sql !== '', sql };
    }
    throw new Error(`prisma migrate diff failed (${result.status}):\n${result.stderr}${result.stdout}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function timestamp(date = new Date()): string {
  return date.toISOString().replace(/[-:T]/g, '').slice(0, 14);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  helpIfAsked(`usage: npm run db:diff -- check | new <snake_case_name>

check: exits 1 (printing the missing SQL) when replaying prisma/migrations does not give
prisma/schema.prisma. new: writes that SQL as a new migration folder named after the argument.`);
  const [command, name] = process.argv.slice(2);
  if (command === 'check') {
    const { drift, sql } = diffMigrationsToSchema();
    if (drift) {
      console.error('prisma/migrations do not produce prisma/schema.prisma; missing:\n' + sql);
      process.exit(1);
    }
    console.log('prisma/migrations and prisma/schema.prisma agree');
  } else if (command === 'new' && name && /^[a-z0-9_]+$/.test(name)) {
    const { drift, sql } = diffMigrationsToSchema();
    if (!drift) {
      console.log('nothing to do: the migrations already produce the schema');
    } else {
      const dir = path.join(migrationsDir, `${timestamp()}_${name}`);
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, 'migration.sql'), sql + '\n');
      console.log(`wrote ${path.relative(root, dir)}/migration.sql`);
    }
  } else {
    console.error('usage: npm run db:diff -- check | new <snake_case_name>');
    process.exit(2);
  }
}
