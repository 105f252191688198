/**
 * The process logger's redaction, built from the configuration: configured
 * header names, secret fields, every secret value wherever it lands, and
 * passwords inside any URL string (user info and `password=`).
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/runtime/log.js';
import { redactionFor, scrubLine } from '../src/runtime/redaction.js';

const CONFIG = {
  LOG_LEVEL: 'trace' as const,
  SERVICE_API_KEY: 'sk_live_service_key_1',
  SERVICE_API_KEY_HEADER: 'x-vital-api-key',
  MANAGEMENT_KEY: 'mg_management_key_2',
  REPLICA_API_KEY: 'rk_replica_key_3',
  REPLICA_API_KEY_HEADER: 'x-replica-key',
  WEBHOOK_SECRET: 'whsec_c2VjcmV0LXdlYmhvb2sta2V5LTQ=',
  REDIS_URL: 'rediss://mirror:redis%2Fpass5@10.0.0.5:6380/2',
  REDIS_PASSWORD: 'cluster-password-6',
  REDIS_SENTINEL_PASSWORD: 'sentinel-password-7',
};

function logged(write: (log: ReturnType<typeof createLogger>) => void): string {
  let out = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      out += chunk.toString();
      done();
    },
  });
  write(createLogger(CONFIG, sink));
  return out;
}

describe('redaction built from the configuration', () => {
  it('hides the configured headers, the webhook signature and secret-named fields by path', () => {
    const out = logged((log) =>
      log.trace(
        {
          headers: { 'x-vital-api-key': 'h1-value', 'x-replica-key': 'h2-value', 'webhook-signature': 'v1,h3-value', accept: 'json' },
          req: { headers: { 'x-vital-api-key': 'h4-value' } },
          WEBHOOK_SECRET: 'f1-value',
          REDIS_SENTINEL_PASSWORD: 'f2-value',
        },
        'request',
      ),
    );
    for (const v of ['h1-value', 'h2-value', 'h3-value', 'h4-value', 'f1-value', 'f2-value']) expect(out).not.toContain(v);
    expect(out).toContain('"accept":"json"');
    expect(out).toContain('[redacted]');
  });

  it('hides every secret value wherever it lands: a message, an error, a nested string', () => {
    const values = [
      CONFIG.SERVICE_API_KEY,
      CONFIG.MANAGEMENT_KEY,
      CONFIG.REPLICA_API_KEY,
      CONFIG.WEBHOOK_SECRET,
      'c2VjcmV0LXdlYmhvb2sta2V5LTQ=',
      'redis/pass5',
      CONFIG.REDIS_PASSWORD,
      CONFIG.REDIS_SENTINEL_PASSWORD,
    ];
    const out = logged((log) => {
      for (const v of values) {
        log.error({ err: new Error(`refused ${v}`), detail: { note: `got ${v}` } }, `failed with ${v}`);
      }
    });
    for (const v of values) expect(out).not.toContain(v);
    expect(out.split('\n').filter((l) => l !== '')).toHaveLength(values.length);
  });

  it('hides the password of any URL string and password= queries, keeping the rest readable', () => {
    const out = logged((log) =>
      log.warn({ url: 'https://hooks:hookpass9@example.test/in?password=qpass9&x=1' }, 'redis://:otherpw9@10.0.0.9:6379 down'),
    );
    for (const v of ['hookpass9', 'qpass9', 'otherpw9']) expect(out).not.toContain(v);
    expect(out).toContain('https://hooks:[redacted]@example.test/in?password=[redacted]&x=1');
    expect(out).toContain('redis://:[redacted]@10.0.0.9:6379 down');
  });

  it('leaves a line without secrets as it was; short values are not treated as secrets', () => {
    const redaction = redactionFor({ SERVICE_API_KEY: 'abc', SERVICE_API_KEY_HEADER: 'x-key' });
    expect(redaction.secrets).toEqual([]);
    expect(redaction.paths).toContain('headers["x-key"]');
    const line = '{"msg":"sync finished","url":"https://example.test/v2/user/?limit=500"}';
    expect(scrubLine(line, redaction)).toBe(line);
  });
});
