/**
 * Run before every test file (vitest.config.ts `setupFiles`): tests ignore
 * `REDIS_URL` and its siblings. Every test starts the redis-servers it uses
 * (test/support/redis-server.ts), so a developer's or CI's Redis is never
 * written to; removing the variables here, before any test runs, keeps them
 * out of the children the tests spawn with `process.env` too.
 */
import { SETTINGS, type EnvName } from '../../src/runtime/config.js';

/** The registry's Redis group (src/runtime/config.ts): the node, cluster and sentinel lists, credentials, TLS, the key prefix. */
const REDIS_VARIABLES = (Object.keys(SETTINGS) as EnvName[]).filter((name) => SETTINGS[name].group === 'redis');

for (const name of REDIS_VARIABLES) {
  delete process.env[name];
  delete process.env[`${name}_FILE`];
}
