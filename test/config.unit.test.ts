import { describe, expect, it } from 'vitest';
import { ConfigPass, readConfig, SERVICE_ENV } from '../src/runtime/config.js';
import { checkAuditLocation } from '../src/runtime/audit-location-check.js';
import { problemsOf } from './support/config-problems.js';
import { AUDIT_LOCATION_ENV } from '../db/audit-location.js';

describe('readConfig', () => {
  it('applies defaults', () => {
    const c = readConfig(['REDIS_URL', 'MIRROR_DB', 'SYNC_CRON', 'SYNC_CONCURRENCY', 'SERVICE_API_KEY_HEADER', 'LOG_LEVEL'], {});
    expect(c).toEqual({
      REDIS_URL: undefined,
      MIRROR_DB: './data/mirror.db',
      SYNC_CRON: '*/15 * * * *',
      SYNC_CONCURRENCY: 4,
      SERVICE_API_KEY_HEADER: 'x-service-api-key',
      LOG_LEVEL: 'info',
    });
  });

  it('leaves SYNC_STALE_AFTER_MS unset by default (three schedule intervals) and checks a given one', () => {
    expect(readConfig(['SYNC_STALE_AFTER_MS'], {})).toEqual({ SYNC_STALE_AFTER_MS: undefined });
    expect(readConfig(['SYNC_STALE_AFTER_MS'], { SYNC_STALE_AFTER_MS: '3600000' }).SYNC_STALE_AFTER_MS).toBe(3_600_000);
    expect(problemsOf(() => readConfig(['SYNC_STALE_AFTER_MS'], { SYNC_STALE_AFTER_MS: '10' }))[0]).toMatch(/^SYNC_STALE_AFTER_MS: /);
  });

  it('takes retention in days, fractions down to a minute, and 0 only where it means for ever', () => {
    const read = (env: Record<string, string>) => readConfig(['CHANGES_RETENTION_DAYS', 'DELETED_RETENTION_DAYS'], env);
    expect(read({})).toEqual({ CHANGES_RETENTION_DAYS: 30, DELETED_RETENTION_DAYS: 90 });
    expect(read({ CHANGES_RETENTION_DAYS: '0.25', DELETED_RETENTION_DAYS: '0' })).toEqual({
      CHANGES_RETENTION_DAYS: 0.25,
      DELETED_RETENTION_DAYS: 0,
    });
    const problems = problemsOf(() => read({ CHANGES_RETENTION_DAYS: '0', DELETED_RETENTION_DAYS: '0.0001' }));
    expect(problems.map((p) => p.split(':')[0])).toEqual(['CHANGES_RETENTION_DAYS', 'DELETED_RETENTION_DAYS']);
    expect(problems[1]).toMatch(/at least one minute/);
    expect(problemsOf(() => read({ DELETED_RETENTION_DAYS: 'soon' }))[0]).toMatch(/^DELETED_RETENTION_DAYS: /);
  });

  it('parses and normalises given values', () => {
    const c = readConfig([...SERVICE_ENV], {
      SERVICE_BASE_URL: 'https://api.example.com/',
      SERVICE_API_KEY: 'pk_us_abc',
      SERVICE_API_KEY_HEADER: 'X-Vital-API-Key',
      HTTP_CONNECTIONS: '16',
    });
    expect(c.SERVICE_BASE_URL).toBe('https://api.example.com');
    expect(c.SERVICE_API_KEY_HEADER).toBe('x-vital-api-key');
    expect(c.HTTP_CONNECTIONS).toBe(16);
  });

  it('lists every missing or invalid variable in one error', () => {
    const problems = problemsOf(() =>
      readConfig(['SERVICE_BASE_URL', 'SERVICE_API_KEY', 'SYNC_CONCURRENCY', 'SYNC_CRON', 'REDIS_URL', 'LOG_LEVEL'], {
        SERVICE_BASE_URL: 'ftp://nope',
        SERVICE_API_KEY: '',
        SYNC_CONCURRENCY: 'many',
        SYNC_CRON: 'every tuesday',
        REDIS_URL: 'http://127.0.0.1:6379',
        LOG_LEVEL: 'loud',
      }),
    );
    expect(problems.map((p) => p.split(':')[0])).toEqual([
      'SERVICE_BASE_URL',
      'SERVICE_API_KEY',
      'SYNC_CONCURRENCY',
      'SYNC_CRON',
      'REDIS_URL',
      'LOG_LEVEL',
    ]);
    expect(problems[1]).toBe('SERVICE_API_KEY: is required');
    expect(problems[3]).toContain('cron');
  });

  it('never prints a value', () => {
    const err = (() => {
      try {
        readConfig(['REDIS_URL', 'SERVICE_BASE_URL'], { REDIS_URL: 'http://:hunter2@host', SERVICE_BASE_URL: 'not a url hunter3' });
      } catch (e) {
        return e as Error;
      }
      throw new Error('expected an error');
    })();
    expect(err.message).not.toContain('hunter2');
    expect(err.message).not.toContain('hunter3');
    expect(err.message).toContain('REDIS_URL');
  });

  it('refuses a key that cannot go into a header, naming the variable but never the value', () => {
    for (const bad of ['sk_hunter2\n', 'mg_hunter2 x', 'sk_hunter2\r\nX-Evil: 1']) {
      const problems = problemsOf(() => readConfig(['SERVICE_API_KEY', 'MANAGEMENT_KEY'], { SERVICE_API_KEY: bad, MANAGEMENT_KEY: bad }));
      expect(problems.map((p) => p.split(':')[0])).toEqual(['SERVICE_API_KEY', 'MANAGEMENT_KEY']);
      expect(problems.join('\n')).toMatch(/line breaks/);
      expect(problems.join('\n')).not.toContain('hunter2');
    }
  });

  it('has defaults for the sync and request bounds', () => {
    expect(
      readConfig(
        [
          'HTTP_REQUEST_TIMEOUT_MS',
          'HTTP_HEADERS_TIMEOUT_MS',
          'SYNC_MAX_DURATION_MS',
          'SYNC_PAGE_RETRY_BUDGET_MS',
          'SYNC_MAX_PAGE_BYTES',
          'SYNC_MAX_RECORD_BYTES',
        ],
        {},
      ),
    ).toEqual({
      HTTP_REQUEST_TIMEOUT_MS: 60_000,
      HTTP_HEADERS_TIMEOUT_MS: 30_000,
      SYNC_MAX_DURATION_MS: 7_200_000,
      SYNC_PAGE_RETRY_BUDGET_MS: 120_000,
      SYNC_MAX_PAGE_BYTES: 32 * 1024 * 1024,
      SYNC_MAX_RECORD_BYTES: 1024 * 1024,
    });
  });

  it('asks only for what it is given to read', () => {
    expect(readConfig(['MIRROR_DB'], {})).toEqual({ MIRROR_DB: './data/mirror.db' });
  });

  it('names an AUDIT_DB that is the MIRROR_DB file among the other problems of a pass that checks it', () => {
    const env = { MIRROR_DB: 'data/mirror.db', AUDIT_DB: './data/../data/mirror.db', LOG_LEVEL: 'loud' };
    const read = (e: Record<string, string>) => {
      const pass = new ConfigPass([...AUDIT_LOCATION_ENV, 'LOG_LEVEL'], e);
      pass.check(AUDIT_LOCATION_ENV, checkAuditLocation);
      return pass.done();
    };
    const problems = problemsOf(() => read(env));
    expect(problems.map((p) => p.split(/[:=]/)[0])).toEqual(['LOG_LEVEL', 'AUDIT_DB']);
    expect(problems[1]).toContain('must not be the MIRROR_DB file');
    expect(read({ MIRROR_DB: 'data/mirror.db' })).toMatchObject({ MIRROR_DB: 'data/mirror.db', AUDIT_DB: undefined });
  });
});
