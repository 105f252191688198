/**
 * The sync engine's decisions, on fakes: an in-memory directory and an
 * in-memory store, no HTTP, no SQLite (those adapters have their own tests
 * against the stand-in and a real file). What is decided: which listings
 * reach the store, which missing users are deleted, and a run's status.
 */
import { describe, expect, it } from 'vitest';
import { runSync, type SyncOptions } from '../src/sync/engine.js';
import { RunWriter } from '../src/sync/run-writer.js';
import { MemoryDirectory } from './support/memory-directory.js';
import { MemoryMirrorStore } from './support/memory-store.js';
import { range, userId, wireUser } from './support/mirror-fixtures.js';

const NO_WAIT = { baseMs: 0, maxMs: 0, maxRetryAfterMs: 0 };

function rig(count: number) {
  const directory = new MemoryDirectory(range(1, count + 1).map((n) => wireUser(n)));
  const store = new MemoryMirrorStore();
  const writer = new RunWriter(store);
  const sync = (options: Partial<SyncOptions> = {}) =>
    runSync({ client: directory, writer, backoff: NO_WAIT, pageAttempts: 1, pageRetryBudgetMs: 0, ...options });
  return { directory, store, sync };
}

describe('the sync engine, in memory', () => {
  it('writes every user on a first sync, and nothing on an unchanged re-sync', async () => {
    const { directory, store, sync } = rig(1_200);
    const first = await sync();
    expect(first).toMatchObject({ status: 'succeeded', pages: 3, usersSeen: 1_200, created: 1_200 });
    expect(store.written).toHaveLength(1_200);

    const again = await sync();
    expect(again).toMatchObject({ status: 'succeeded', usersSeen: 1_200, created: 0, updated: 0, deleted: 0 });
    expect(store.written).toHaveLength(1_200);
    expect(directory.resolveRequests).toBe(0);
  });

  it('writes only the records whose bytes changed', async () => {
    const { directory, store, sync } = rig(600);
    await sync();
    directory.users[10] = wireUser(11, { ingestion_end: '2026-11-01' });
    directory.users[500] = wireUser(501, { client_user_id: 'renamed-501' });
    const run = await sync();
    expect(run).toMatchObject({ status: 'succeeded', updated: 2, created: 0 });
    expect(
      store.written
        .slice(600)
        .map((w) => w.record.user.user_id)
        .sort(),
    ).toEqual([userId(11), userId(501)].sort());
    expect(store.activeByClientId().get('renamed-501')).toBe(userId(501));
  });

  it('deletes a missing user only once the service confirms it gone', async () => {
    const { directory, store, sync } = rig(100);
    await sync();
    directory.users = directory.users.filter((u) => u.user_id !== userId(7));
    directory.hiddenFromListing.add('client-8');
    const run = await sync();
    expect(run).toMatchObject({ status: 'succeeded', candidates: 2, confirmedGone: 1, stillThere: 1, deleted: 1 });
    expect(store.users.get(userId(7))?.deleted).toBe(true);
    expect(store.users.get(userId(8))?.deleted).toBe(false);
  });

  it('keeps a candidate whose check fails, and settles it in a later run', async () => {
    const { directory, store, sync } = rig(100);
    await sync();
    directory.users = directory.users.filter((u) => u.user_id !== userId(3));
    directory.failingResolves.add('client-3');
    expect(await sync()).toMatchObject({ status: 'succeeded', unverified: 1, deleted: 0 });
    expect(store.users.get(userId(3))?.deleted).toBe(false);
    directory.failingResolves.clear();
    expect(await sync()).toMatchObject({ status: 'succeeded', confirmedGone: 1, deleted: 1 });
  });

  it("checks missing users SYNC_VERIFY_CONCURRENCY at a time, not the scan's concurrency: the checks hold the run's transaction", async () => {
    const { directory, sync } = rig(200);
    await sync();
    directory.users = directory.users.slice(0, 150);
    const run = await sync({ concurrency: 2, verifyConcurrency: 12, maxDeleteRatio: 0.5 });
    expect(run).toMatchObject({ status: 'succeeded', confirmedGone: 50, deleted: 50 });
    expect(directory.maxResolvesInFlight).toBe(12);
  });

  it('deletes nothing and checks nothing when a page failed: every user on it would be a candidate', async () => {
    const { directory, store, sync } = rig(1_500);
    await sync();
    directory.failingOffsets.add(500);
    const before = directory.resolveRequests;
    const run = await sync();
    expect(run).toMatchObject({ status: 'partial', pageFailures: 1, deleted: 0 });
    expect(directory.resolveRequests).toBe(before);
    expect([...store.users.values()].filter((u) => u.deleted)).toHaveLength(0);
  });

  it('holds every deletion back when more than the allowed share went missing', async () => {
    const { directory, store, sync } = rig(100);
    await sync();
    directory.users = directory.users.slice(0, 50);
    const run = await sync({ maxDeleteRatio: 0.1 });
    expect(run).toMatchObject({ status: 'partial', candidates: 50, deferred: 50, deleted: 0 });
    expect(run.reason).toMatch(/SYNC_MAX_DELETE_RATIO/);
    expect(directory.resolveRequests).toBe(0);
    expect(store.activeByClientId().size).toBe(100);
  });

  it('publishes nothing when the first page cannot be read', async () => {
    const { directory, store, sync } = rig(100);
    await sync();
    directory.failingOffsets.add(0);
    directory.users = [];
    const run = await sync();
    expect(run.status).toBe('failed');
    expect(store.activeByClientId().size).toBe(100);
    expect(store.runs.at(-1)).toMatchObject({ published: false, finished: { status: 'failed' } });
  });

  it('records the run failed, its transaction ended, when the mirror cannot be read at its start', async () => {
    const { directory, store, sync } = rig(10);
    // A re-sync: a first sync reads no users at its start.
    await sync();
    store.activeUsers = () => {
      throw new Error('disk I/O error');
    };
    await expect(runSync({ client: directory, writer: new RunWriter(store), backoff: NO_WAIT })).rejects.toThrow(/disk I\/O error/);
    expect(store.runs.at(-1)).toMatchObject({
      id: 2,
      published: false,
      finished: { status: 'failed', error: expect.stringMatching(/disk I\/O error/) },
    });
    expect(() => store.writeUsers(2, [])).toThrow(/not open/);
  });

  it('takes a missing user whose client_user_id now names another user as gone', async () => {
    const { directory, store, sync } = rig(10);
    await sync();
    // User 1 is gone upstream and user 2 took its client_user_id.
    directory.users[1] = wireUser(2, { client_user_id: 'client-1' });
    directory.users.splice(0, 1);
    const run = await sync();
    expect(run).toMatchObject({ status: 'succeeded', updated: 1, deleted: 1 });
    expect(store.activeByClientId().get('client-1')).toBe(userId(2));
    expect(store.users.get(userId(1))?.deleted).toBe(true);
  });

  it('asks for the next page before staging the one that came, keeping one request per worker in flight', async () => {
    const { directory, store, sync } = rig(2_000);
    // Users already staged when each page was asked for.
    const stagedAtRequest = new Map<number, number>();
    let inFlight = 0;
    let maxInFlight = 0;
    const list = directory.listUserRecords.bind(directory);
    directory.listUserRecords = async (params, signal) => {
      stagedAtRequest.set(params.offset, store.written.length);
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      try {
        return await list(params, signal);
      } finally {
        inFlight--;
      }
    };
    expect(await sync({ concurrency: 1 })).toMatchObject({ status: 'succeeded', usersSeen: 2_000 });
    expect(maxInFlight).toBe(1);
    // With one worker: offset 1000 is asked for while offset 500 waits to be staged, and so on.
    expect([...stagedAtRequest]).toEqual([
      [0, 0],
      [500, 500],
      [1_000, 500],
      [1_500, 1_000],
    ]);
  });
});
