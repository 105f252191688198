import { defineConfig } from 'vitest/config';

/**
 * Two tiers, told apart by the file name. `unit`: files named
 * `*.unit.test.ts`, the pure decisions (no network, no Redis, no child
 * processes, no database files), `npm run test:unit`, seconds. `integration`:
 * every other `*.test.ts`, against real parts. `npm test` runs both.
 */
const UNIT = ['test/**/*.unit.test.ts'];

// Tests talk to real Redis servers, real HTTP servers and child processes:
// give them room, and keep heavy files from starving each other on 2 cores.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      { extends: true, test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: UNIT } },
    ],
  },
});
