/**
 * `sync --once` and the sync lease, as separate processes: a lease held
 * elsewhere keeps the command from starting a run (exit 5) instead of
 * interrupting the holder's. Needs `npm run build` first (`npm test` does it).
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { acquireSyncLease } from '../db/sync-lease.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

beforeAll(() => requireBuiltCli('src/commands/sync.js'));

let rig: SyncRig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

const runs = (r: SyncRig) => r.db.prepare('SELECT count(*) FROM sync_runs').pluck().get();

describe('sync --once and the sync lease', () => {
  it('does not start while a live process on another host holds the lease, and runs once it is released', async () => {
    const r = (rig = await createSyncRig({ users: 1_000, seed: 1 }));
    const held = acquireSyncLease(r.db, { host: 'other-host' });
    if (!held.acquired) throw new Error('expected the lease');

    const busy = await runCli(['sync', '--once'], r.env());
    expect(busy.code, busy.stderr).toBe(5);
    expect(busy.stderr.trim()).toBe(
      `user-mirror sync: a sync is already running on this mirror (pid ${process.pid} on host other-host); not starting another`,
    );
    expect(runs(r)).toBe(0);
    expect(r.db.prepare('SELECT holder FROM sync_lease').pluck().get()).toBe(held.lease.holder);

    held.lease.release();
    const ran = await runCli(['sync', '--once'], r.env());
    expect(ran.code, ran.stderr).toBe(0);
    expect(r.db.prepare('SELECT status, users_seen FROM sync_runs').all()).toEqual([{ status: 'succeeded', users_seen: 1_000 }]);
    // Released at the end, so the daemon's next tick is not skipped.
    expect(r.db.prepare('SELECT count(*) FROM sync_lease').pluck().get()).toBe(0);
  });

  it('does not start while a live process on this host holds the lease', async () => {
    const r = (rig = await createSyncRig({ users: 1_000, seed: 1 }));
    const held = acquireSyncLease(r.db);
    if (!held.acquired) throw new Error('expected the lease');
    try {
      const busy = await runCli(['sync', '--once'], r.env());
      expect(busy.code, busy.stderr).toBe(5);
      expect(busy.stderr).toMatch(new RegExp(`\\(pid ${process.pid} on host [^)]+\\); not starting another`));
      expect(runs(r)).toBe(0);
    } finally {
      held.lease.release();
    }
  });
});
