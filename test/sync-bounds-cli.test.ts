/**
 * The scenarios against the built `sync --once`, the way an operator
 * runs it: a key with a newline, a short 503 outage, a page that trickles
 * forever. Needs `npm run build` first (`npm test` does it).
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { createSyncRig, mirrorFingerprint, type SyncRig } from './support/sync-rig.js';

beforeAll(() => requireBuiltCli('src/commands/sync.js'));

let rig: SyncRig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

describe('sync --once', () => {
  it('treats a key with a newline as a configuration error (exit 2), naming the variable, never the key', async () => {
    const r = (rig = await createSyncRig({ users: 10 }));
    const res = await runCli(['sync', '--once'], r.env({ SERVICE_API_KEY: `${r.standIn.apiKey}\n` }));
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/SERVICE_API_KEY: .*line breaks/);
    expect(res.stderr + res.stdout).not.toContain(r.standIn.apiKey);
    expect(r.standIn.counts.get('list')).toBe(0);
  });

  it('rides out a 3-second 503 outage that outlasts its attempts (exit 0)', async () => {
    // The outage starts at the CLI's first list request, whenever a busy machine gets it there, and
    // lasts 3 s from then and at least three failed list requests: more than the run's two attempts.
    const OUTAGE_MS = 3_000;
    const OUTAGE_FAILURES = 3;
    let outageFrom: number | undefined;
    let failed = 0;
    const r = (rig = await createSyncRig({
      users: 1_200,
      faults: { rate503: 1, retryAfter: null },
      onRequest: (entry) => {
        if (entry.route !== 'list' || entry.status !== 503) return;
        outageFrom ??= performance.now();
        failed++;
        if (failed >= OUTAGE_FAILURES && performance.now() - outageFrom >= OUTAGE_MS) r.standIn.faults.clear();
      },
    }));
    // Two attempts take well under a second; only the time budget (default) can carry the run through.
    const res = await runCli(['sync', '--once'], r.env({ SYNC_PAGE_ATTEMPTS: '2' }), 60_000);
    expect(res.code, res.stdout).toBe(0);
    expect(r.standIn.counts.get('list', 503)).toBeGreaterThanOrEqual(OUTAGE_FAILURES);
    expect(r.standIn.counts.get('list', 200)).toBeGreaterThan(0);
  });

  it('ends a run whose pages trickle forever: each request times out, the run passes its deadline (exit 1), nothing published', async () => {
    const r = (rig = await createSyncRig({ users: 1_200 }));
    const before = mirrorFingerprint(r.db);
    r.standIn.faults.set({ slowBodyRate: 1, slowChunkBytes: 1, slowChunkDelayMs: 100 });
    const res = await runCli(
      ['sync', '--once'],
      r.env({ HTTP_REQUEST_TIMEOUT_MS: '1000', HTTP_BODY_TIMEOUT_MS: '20000', SYNC_MAX_DURATION_MS: '4000' }),
      60_000,
    );
    expect(res.code, res.stdout).toBe(1);
    expect(res.stdout).toContain('HTTP_REQUEST_TIMEOUT_MS');
    expect(res.stdout).toMatch(/run deadline passed: not finished within SYNC_MAX_DURATION_MS/);
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });
});
