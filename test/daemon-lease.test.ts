/**
 * The SQLite sync lease against a real mirror file, through two connections
 * (as two processes would hold them).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { acquireSyncLease, withSyncLease } from '../db/sync-lease.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { eventually } from './support/eventually.js';

let dir: string;
let a: Db;
let b: Db;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-lease-'));
  a = openMirror(join(dir, 'mirror.db'));
  b = openMirror(join(dir, 'mirror.db'));
});

afterEach(() => {
  a.close();
  b.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('acquireSyncLease', () => {
  it('lets one holder in at a time, and the next in after release', () => {
    const first = acquireSyncLease(a);
    expect(first.acquired).toBe(true);
    const second = acquireSyncLease(b);
    expect(second).toMatchObject({ acquired: false, heldBy: { pid: process.pid } });
    if (first.acquired) first.lease.release();
    const third = acquireSyncLease(b);
    expect(third.acquired).toBe(true);
    if (third.acquired) third.lease.release();
  });

  it('refuses a second sync in the same process too', () => {
    const first = acquireSyncLease(a);
    expect(acquireSyncLease(a).acquired).toBe(false);
    if (first.acquired) first.lease.release();
  });

  it('takes over at once from a dead holder on this host', () => {
    const first = acquireSyncLease(a, { ttlMs: 3_600_000 });
    if (!first.acquired) throw new Error('expected the lease');
    // A pid that certainly belonged to a process that has exited.
    const gone = spawnSync(process.execPath, ['-e', '0']).pid;
    a.prepare('UPDATE sync_lease SET pid = ?').run(gone);
    const second = acquireSyncLease(b);
    expect(second.acquired).toBe(true);
    if (second.acquired) second.lease.release();
    first.lease.release();
  });

  it('takes over an expired lease from another host', () => {
    const first = acquireSyncLease(a, { ttlMs: 1_000, now: () => 0, host: 'other-host' });
    expect(first.acquired).toBe(true);
    expect(acquireSyncLease(b, { now: () => 999 }).acquired).toBe(false);
    const late = acquireSyncLease(b, { now: () => 1_000 });
    expect(late.acquired).toBe(true);
    if (late.acquired) late.lease.release();
    if (first.acquired) first.lease.release();
  });

  it('a sync holding the write lock keeps the lease, even when its (uncommitted) renewals make it look expired', () => {
    const first = acquireSyncLease(a, { ttlMs: 1_000, now: () => 0, host: 'other-host' });
    if (!first.acquired) throw new Error('expected the lease');
    const writer = sqliteRunWriter(a);
    const runId = writer.beginRun();
    // As the holder's renewals would, inside the run's open transaction: invisible to b.
    a.prepare('UPDATE sync_lease SET expires_at = 10000').run();
    b.pragma('busy_timeout = 100');
    const claim = acquireSyncLease(b, { now: () => 5_000 });
    expect(claim).toMatchObject({ acquired: false, heldBy: { holder: first.lease.holder, expiresAt: 1_000 } });
    writer.publish(runId, { deletionsChecked: false, deletions: [] });
    writer.finishRun(runId, { status: 'partial', pages: 0, usersSeen: 0 });
    expect(acquireSyncLease(b, { now: () => 5_000 })).toMatchObject({ acquired: false, heldBy: { expiresAt: 10_000 } });
    first.lease.release();
  });

  it('tells the holder when its lease was taken', async () => {
    let lost = false;
    const first = acquireSyncLease(a, { ttlMs: 3_000, onLost: () => (lost = true) });
    expect(first.acquired).toBe(true);
    b.prepare("UPDATE sync_lease SET holder = 'someone-else'").run();
    // Noticed at the next renewal (a third of the TTL), whenever a busy machine runs it.
    await eventually(() => lost, 10_000, 'the holder told of the loss', 20);
    if (first.acquired) first.lease.release();
    // Release must not delete the row it no longer owns.
    expect(b.prepare('SELECT holder FROM sync_lease').get()).toEqual({ holder: 'someone-else' });
  });

  it('keeps renewing while held', async () => {
    let t = 0;
    const first = acquireSyncLease(a, { ttlMs: 3_000, now: () => t });
    t = 2_500;
    // Renewed at the next renewal (a third of the TTL) from the clock it is given, whenever a busy machine runs it.
    const expiresAt = () => (b.prepare('SELECT expires_at FROM sync_lease').get() as { expires_at: number }).expires_at;
    await eventually(() => expiresAt() !== 3_000, 10_000, 'the lease renewed', 20);
    expect(expiresAt()).toBe(5_500);
    if (first.acquired) first.lease.release();
  });
});

describe('withSyncLease', () => {
  const holders = (db: Db) => db.prepare('SELECT count(*) FROM sync_lease').pluck().get();

  it('runs the work holding the lease and releases it after, also on a throw', async () => {
    const done = await withSyncLease(a, {}, async () => {
      expect(holders(b)).toBe(1);
      return 'ran';
    });
    expect(done).toEqual({ ran: true, value: 'ran' });
    expect(holders(b)).toBe(0);
    await expect(withSyncLease(a, {}, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(holders(b)).toBe(0);
  });

  it('does not run the work while another holds the lease', async () => {
    const other = acquireSyncLease(b, { host: 'other-host' });
    let ran = false;
    const outcome = await withSyncLease(a, {}, async () => {
      ran = true;
    });
    expect(ran).toBe(false);
    expect(outcome).toMatchObject({ ran: false, heldBy: { host: 'other-host', pid: process.pid } });
    if (other.acquired) other.lease.release();
  });

  it("aborts the work's signal when the lease is lost, and on the caller's signal", async () => {
    let told = false;
    const lost = await withSyncLease(a, { ttlMs: 3_000, onLost: () => (told = true) }, async (signal) => {
      b.prepare("UPDATE sync_lease SET holder = 'someone-else'").run();
      await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
      return (signal.reason as Error).message;
    });
    expect(lost).toEqual({ ran: true, value: 'sync lease lost' });
    expect(told).toBe(true);
    b.prepare('DELETE FROM sync_lease').run();

    const caller = new AbortController();
    const stopped = await withSyncLease(a, { signal: caller.signal }, async (signal) => {
      caller.abort(new Error('shutdown'));
      return signal.aborted && (signal.reason as Error).message;
    });
    expect(stopped).toEqual({ ran: true, value: 'shutdown' });
  });
});
