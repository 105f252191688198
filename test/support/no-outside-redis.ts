/**
 * Run before every test file (vitest.config.ts `setupFiles`): tests ignore
 * `REDIS_URL` and its siblings. Every test starts the redis-servers it uses
 * (test/support/redis-server.ts), so a developer's or CI's Redis is never
 * written to; removing the variables here, before any test runs, keeps them
 * out of the children the tests spawn with `process.env` too.
 */
const REDIS_VARIABLES = [
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_NAME',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_USERNAME',
  'REDIS_PASSWORD',
  'REDIS_TLS',
];

for (const name of REDIS_VARIABLES) {
  delete process.env[name];
  delete process.env[`${name}_FILE`];
}
