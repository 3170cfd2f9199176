import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, describeConfig, loadConfig, loadDotEnv } from '../src/config.js';

describe('configuration', () => {
  const dotEnv = (text: string) => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'api-env-')), '.env');
    writeFileSync(file, text);
    return file;
  };

  it('.env fills in development what the environment leaves unset; the environment wins', () => {
    const file = dotEnv(
      'PORT=4567\nLOG_LEVEL=debug\n# a comment\nCORS_ORIGINS="https://a.example, https://b.example"\n',
    );
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
    const config = loadConfig({
      DATABASE_URL: 'postgres://app:s3cret-pass@db.internal:5432/api',
      DATABASE_REPLICA_URL: 'postgres://app:s3cret-pass@replica.internal:5432/api',
      CHANGE_DECODE_URL: 'postgres://app:s3cret-pass@replica.internal:5432/api',
      PAGINATION_SECRET: 'p'.repeat(40),
      PORT: '8080',
    });
    const shown = JSON.stringify(describeConfig(config));
    expect(shown).not.toContain('s3cret-pass');
    expect(shown).not.toContain('p'.repeat(40));
    expect(describeConfig(config)).toMatchObject({
      port: 8080,
      databaseUrl: 'postgres://app:********@db.internal:5432/api',
      changeDecodeUrl: 'postgres://app:********@replica.internal:5432/api',
      paginationSecret: '********',
    });
    expect(describeConfig(loadConfig({})).paginationSecret).toBeUndefined();
  });
  /** The problems a setting's value is refused with, or [] when it is taken. */
  const refusal = (env: NodeJS.ProcessEnv): string[] => {
    try {
      loadConfig(env);
      return [];
    } catch (error) {
      if (error instanceof ConfigError) return error.problems;
      throw error;
    }
  };

  // Every numeric setting, with one value past each of its bounds.
  const BOUNDS: [string, number, number][] = [
    ['PORT', 0, 65535],
    ['METRICS_PORT', 0, 65535],
    ['MIGRATION_LOCK_TIMEOUT_MS', 1000, 2_147_483_647],
    ['DATABASE_POOL_SIZE', 1, 500],
    ['DATABASE_CONNECT_TIMEOUT_MS', 100, 2_147_483_647],
    ['DATABASE_STATEMENT_TIMEOUT_MS', 100, 2_147_483_647],
    ['SEARCH_TIMEOUT_MS', 1, 2_147_483_647],
    ['SEARCH_MAX_CONCURRENT', 1, 500],
    ['SEARCH_MAX_PER_ORGANIZATION', 1, 500],
    ['SEARCH_MAX_TIME_PERCENT', 1, 100],
    ['JWT_MAX_AGE_SECONDS', 1, 315_360_000],
    ['JWT_MAX_LIFETIME_SECONDS', 60, 315_360_000],
    ['MAX_TOKEN_BYTES', 512, 65_536],
    ['MAX_BODY_BYTES', 1024, 104_857_600],
    ['MAX_HEADER_BYTES', 256, 1_048_576],
    ['MAX_URL_BYTES', 256, 1_048_576],
    ['MAX_HEAD_BYTES', 4096, 1_048_576],
    ['MAX_HEADER_COUNT', 10, 1000],
    ['MAX_QUERY_PARAMETERS', 10, 10_000],
    ['RATE_LIMIT_PER_ADDRESS', 0, 1_000_000_000],
    ['RATE_LIMIT_PER_CREDENTIAL', 0, 1_000_000_000],
    ['RATE_LIMIT_WINDOW_SECONDS', 1, 2_147_483],
    ['SHUTDOWN_TIMEOUT_MS', 100, 2_147_483_647],
    ['SHUTDOWN_DELAY_MS', 0, 2_147_483_647],
    ['CACHE_MAX_ENTRIES', 0, 100_000_000],
    ['CACHE_MAX_BYTES', 0, 1_099_511_627_776],
    ['CACHE_TTL_SECONDS', 1, 2_147_483],
  ];

  it.each(BOUNDS)('%s: taken at its bounds (%d, %d), refused past them with one line naming it', (name, min, max) => {
    // The drain delay is part of the shutdown's time: each is tried with the other out of its way.
    const beside: NodeJS.ProcessEnv = name === 'SHUTDOWN_TIMEOUT_MS' ? { SHUTDOWN_DELAY_MS: '0' } : {};
    expect(refusal({ ...beside, [name]: String(min) })).toEqual([]);
    if (name === 'SHUTDOWN_DELAY_MS') {
      expect(refusal({ [name]: String(max - 1), SHUTDOWN_TIMEOUT_MS: String(max) })).toEqual([]);
    } else if (name === 'CACHE_MAX_BYTES') {
      // Taken as a number, then held to the memory budget: a terabyte does not fit 250 MB.
      expect(refusal({ [name]: String(max) })).toEqual([
        expect.stringMatching(
          /^MEMORY_BUDGET_MB: CACHE_MAX_BYTES 1048576 MiB \(\d+ MiB of it outside the heap\) need \d+ MiB of heap/,
        ),
      ]);
    } else {
      expect(refusal({ [name]: String(max) })).toEqual([]);
    }
    expect(refusal({ ...beside, [name]: String(max + 1) })).toEqual([`${name}: must be at most ${max}`]);
    if (min > 0) expect(refusal({ ...beside, [name]: String(min - 1) })).toEqual([`${name}: must be at least ${min}`]);
  });

  it.each(BOUNDS.map(([name]) => name))(
    '%s: only decimal digits are a number (no hex, exponent, fraction or sign)',
    (name) => {
      for (const written of ['0x10', '1e3', '10.0', '-5', '+5', '5 apples', 'Infinity']) {
        expect(refusal({ [name]: written }), `${name}=${written}`).toEqual([
          `${name}: must be a whole number in decimal digits`,
        ]);
      }
      // Empty is unset, as a template's `NAME=` means.
      expect(refusal({ [name]: '' })).toEqual([]);
    },
  );

  it('a rate-limit window past what timers take would have emptied every counter at once: refused at start', () => {
    expect(refusal({ RATE_LIMIT_WINDOW_SECONDS: '2147484' })).toEqual([
      'RATE_LIMIT_WINDOW_SECONDS: must be at most 2147483',
    ]);
    expect(loadConfig({ RATE_LIMIT_WINDOW_SECONDS: ' 120 ' }).rateLimit.windowSeconds).toBe(120);
  });

  it('CHANGE_DECODE_URL: a postgres URL beside DATABASE_URL, its primary; anything else is refused naming it', () => {
    const primary = 'postgres://api@primary:5432/app';
    expect(
      loadConfig({ DATABASE_URL: primary, CHANGE_DECODE_URL: ' postgres://api@standby:5432/app ' }).changeDecodeUrl,
    ).toBe('postgres://api@standby:5432/app');
    expect(loadConfig({ DATABASE_URL: primary }).changeDecodeUrl).toBeUndefined();
    expect(refusal({ DATABASE_URL: primary, CHANGE_DECODE_URL: 'http://standby:5432' })).toEqual([
      'CHANGE_DECODE_URL: must be a postgres:// or postgresql:// URL (a standby of DATABASE_URL)',
    ]);
    expect(refusal({ CHANGE_DECODE_URL: 'postgres://api@standby:5432/app' })).toEqual([
      'CHANGE_DECODE_URL: a standby to decode on needs DATABASE_URL, its primary (the embedded database has no stream)',
    ]);
  });

  it('TRUST_PROXY: a hop count is bounded too', () => {
    expect(refusal({ TRUST_PROXY: '2' })).toEqual([]);
    expect(refusal({ TRUST_PROXY: '101' })).toEqual(['TRUST_PROXY: a hop count must be at most 100']);
  });

  it('tracing follows the OpenTelemetry variables: off without an endpoint, and a value the SDK would misread is refused at start', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    const defaults = { sampler: 'parentbased_always_on', ratio: 1 };
    expect(loadConfig({}).tracing).toEqual({ enabled: false, protocol: 'http/protobuf', ...defaults });
    expect(loadConfig(endpoint).tracing).toEqual({ enabled: true, protocol: 'http/protobuf', ...defaults });
    expect(
      loadConfig({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://collector/v1/traces',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      }).tracing,
    ).toEqual({ enabled: true, protocol: 'http/json', ...defaults });
    expect(
      loadConfig({
        ...endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      }).tracing.protocol,
    ).toBe('http/protobuf');
    expect(loadConfig({ ...endpoint, OTEL_SDK_DISABLED: 'true' }).tracing.enabled).toBe(false);
    expect(loadConfig({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }).tracing.enabled).toBe(false);
    expect(
      refusal({ ...endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }),
    ).toEqual([]);
    expect(
      loadConfig({ ...endpoint, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '.25' }).tracing,
    ).toMatchObject({ sampler: 'traceidratio', ratio: 0.25 });
    // The SDK would sample every trace for a sampler it does not know, and export nowhere over a protocol it lacks.
    expect(refusal({ ...endpoint, OTEL_TRACES_SAMPLER: 'traceidratio_typo' })[0]).toMatch(
      /^OTEL_TRACES_SAMPLER: must be one of always_on/,
    );
    expect(refusal({ ...endpoint, OTEL_TRACES_SAMPLER_ARG: '10%' })).toEqual([
      'OTEL_TRACES_SAMPLER_ARG: must be a probability between 0 and 1 (0.1 samples one trace in ten)',
    ]);
    expect(refusal({ ...endpoint, OTEL_TRACES_SAMPLER_ARG: '1.5' })).toHaveLength(1);
    expect(refusal({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })[0]).toMatch(
      /^OTEL_EXPORTER_OTLP_PROTOCOL: must be http\/protobuf or http\/json \(gRPC is not supported/,
    );
    expect(refusal({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toEqual([
      'OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL',
    ]);
    expect(refusal({ ...endpoint, OTEL_TRACES_EXPORTER: 'zipkin' })[0]).toMatch(
      /^OTEL_TRACES_EXPORTER: must be otlp or none/,
    );
  });
});
