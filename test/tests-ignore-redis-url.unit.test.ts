/**
 * The one rule for REDIS_URL in tests (README, test/support/redis-server.ts):
 * it is ignored, and removed before any test runs, so neither a test nor a
 * child it spawns can reach a Redis the run did not start. Run with
 * `REDIS_URL=redis://… npx vitest run test/tests-ignore-redis-url.unit.test.ts` to see it hold.
 */
import { describe, expect, it } from 'vitest';
import config from '../vitest.config.js';

describe('REDIS_URL in tests', () => {
  it('is absent from every test process, with its siblings', () => {
    for (const name of [
      'REDIS_URL',
      'REDIS_URL_FILE',
      'REDIS_CLUSTER_NODES',
      'REDIS_SENTINELS',
      'REDIS_PASSWORD',
      'REDIS_TLS_CA_FILE',
      'QUEUE_PREFIX',
    ]) {
      expect(process.env[name], name).toBeUndefined();
    }
  });

  it('is removed by a setup file every test file runs', () => {
    expect(config.test?.setupFiles).toContain('test/support/no-outside-redis.ts');
  });
});
