import { defineConfig } from 'vitest/config';

// Tests talk to real Redis servers, real HTTP servers and child processes:
// give them room, and keep heavy files from starving each other on 2 cores.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
