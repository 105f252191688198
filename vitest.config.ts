import { defineConfig } from 'vitest/config';

/**
 * Two tiers. `unit`: the pure decisions (no network, no Redis, no child
 * processes, no database files), `npm run test:unit`, seconds. `integration`:
 * everything else, against real parts. `npm test` runs both.
 */
const UNIT = [
  'test/architecture.test.ts',
  'test/change-event-schema.test.ts',
  'test/config.test.ts',
  'test/daemon-decisions.test.ts',
  'test/daemon-watchdog.test.ts',
  'test/error-detail.test.ts',
  'test/redis-settings.test.ts',
  'test/removal-durability-decisions.test.ts',
  'test/removal-failure.test.ts',
  'test/removal-payload.test.ts',
  'test/retry.test.ts',
  'test/stand-in-generator.test.ts',
  'test/sync-child-flags.test.ts',
  'test/sync-decisions.test.ts',
  'test/sync-engine-fakes.test.ts',
  'test/sync-fingerprint-table.test.ts',
  'test/sync-run-ledger.test.ts',
  'test/webhook-signature.test.ts',
];

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
