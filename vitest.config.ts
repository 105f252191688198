import { defineConfig } from 'vitest/config';

/**
 * Two tiers, told apart by the file name. `unit`: files named
 * `*.unit.test.ts`, the pure decisions (no network, no Redis, no child
 * processes, no database files), `npm run test:unit`, seconds. `integration`:
 * every other `*.test.ts`, against real parts. `npm test` runs both.
 */
const UNIT = ['test/**/*.unit.test.ts'];

// Tests talk to real Redis servers, real HTTP servers and child processes:
// keep heavy files from starving each other on 2 cores. The timeouts are
// only a backstop for a hang, far above what any test takes on a busy
// shared machine: a test waits for work with test/support/eventually.ts
// (or a child's exit) and its own deadline, never with a tight test timeout.
export default defineConfig({
  test: {
    testTimeout: 600_000,
    hookTimeout: 600_000,
    teardownTimeout: 60_000,
    // Tests ignore REDIS_URL: each starts its own redis-server (test/support/no-outside-redis.ts).
    setupFiles: ['test/support/no-outside-redis.ts'],
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      { extends: true, test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: UNIT } },
    ],
  },
});
