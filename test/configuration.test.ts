import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeConfig, loadConfig, loadDotEnv } from '../src/config.js';

describe('configuration', () => {
  const dotEnv = (text: string) => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'api-env-')), '.env');
    writeFileSync(file, text);
    return file;
  };

  it('.env fills in development what the environment leaves unset; the environment wins', () => {
    const file = dotEnv('PORT=4567\nLOG_LEVEL=debug\n# a comment\nCORS_ORIGINS="https://a.example, https://b.example"\n');
    const env: NodeJS.ProcessEnv = { LOG_LEVEL: 'warn' };
    expect(loadDotEnv(env, file).sort()).toEqual(['CORS_ORIGINS', 'PORT']);
    const config = loadConfig(env);
    expect(config.port).toBe(4567);
    expect(config.logLevel).toBe('warn');
    expect(config.corsOrigins).toEqual(['https://a.example', 'https://b.example']);
  });

  it('.env is not read with NODE_ENV=production, nor when there is none', () => {
    const file = dotEnv('PORT=4567\n');
    const production: NodeJS.ProcessEnv = { NODE_ENV: 'production' };
    expect(loadDotEnv(production, file)).toEqual([]);
    expect(production.PORT).toBeUndefined();
    expect(loadDotEnv({}, path.join(tmpdir(), 'no-such-dir', '.env'))).toEqual([]);
  });

  it('npm run config shows the effective settings with the database password and pagination secret masked', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://app:s3cret-pass@db.internal:5432/api', PAGINATION_SECRET: 'p'.repeat(40), PORT: '8080' });
    const shown = JSON.stringify(describeConfig(config));
    expect(shown).not.toContain('s3cret-pass');
    expect(shown).not.toContain('p'.repeat(40));
    expect(describeConfig(config)).toMatchObject({ port: 8080, databaseUrl: 'postgres://app:********@db.internal:5432/api', paginationSecret: '********' });
    expect(describeConfig(loadConfig({})).paginationSecret).toBeUndefined();
  });
});
