/**
 * The mirror as a sync run sees it: SQL behind one small interface. The run's
 * decisions (what changed, what is a deletion candidate, what to keep of
 * rejected records) are the sync's (src/sync/run-writer.ts); this applies
 * them. `SqliteMirrorStore` is the one implementation the daemon uses; the
 * engine's decision tests use an in-memory one (test/support/memory-store.ts).
 *
 * A run's writes are one write transaction (BEGIN IMMEDIATE) opened by
 * `beginRun` and committed by `publish`: each page is written as it arrives,
 * while later pages are in flight, and there is no copy of the directory
 * after the scan. In WAL mode readers keep their snapshot of the previous
 * committed mirror until that COMMIT: analytics and offline resolve see the
 * previous complete mirror or the new one, never a half-applied run. A failed
 * run is rolled back; after a kill -9 SQLite discards the uncommitted frames
 * on the next open, leaving the run's row, which the next `beginRun` marks
 * interrupted.
 *
 * The write lock is held for the whole run. Other writers wait for it: an
 * online resolve up to RESOLVE_WRITE_WAIT_MS, a second sync's lease claim
 * (which takes it as "held", db/sync-lease.ts). The lease's renewals run on
 * this connection, inside the transaction. Removal audits live in their own
 * file (db/open-audit.ts), so a scan never blocks them.
 */
import { RunSources } from './run-source.js';
import type { Db } from './open.js';
import { ChangeFeed } from './change-feed.js';
import { FirstSyncLoad, type BulkLoad } from './first-sync-load.js';
import type { IdentityConflict } from './identity-conflicts.js';
import { RunRecords, type ChangeCounts, type FinishRunInput } from './sync-runs.js';
import type { RunFieldWarning } from './schema-drift.js';
import { UserWrites, type PriorRow, type UserWrite } from './user-writes.js';
import { MirrorKeys } from './mirror-keys.js';
import type { BaselineMode } from './change-event.js';

export interface PublishResult extends ChangeCounts {
  /** Listings of a user already listed in the run, found by the publish: a first sync finds them only then. */
  repeats: number;
  /** The identity conflicts the store found (db/identity-conflicts.ts): keys taken from users listed in the run, a first sync's repeats. */
  conflicts: { count: number; kept: IdentityConflict[] };
}

/** What publish applies besides the written pages. */
export interface PublishDeletions {
  /** True when the run settled its deletion candidates (recorded as `swept`). */
  deletionsChecked: boolean;
  /** user_ids the service confirmed gone; those still active are soft-deleted. */
  deletions: readonly string[];
}

export interface MirrorStore {
  /** Records a new run (committed, `running`) without opening its transaction: the run is visible while it waits for its first page. */
  recordRun(): number;
  /** The listing's `total` as the last published run last saw it; undefined before any. */
  lastListedTotal(): number | undefined;
  /** A follower's leader, recorded with a run and read back (./run-source.ts); absent on stores that keep none. */
  sources?: RunSources;
  /** Opens the write transaction of `recorded` (from recordRun), or of a new run. Returns the run id. */
  beginRun(totalAtStart?: number, recorded?: number): number;
  /** [user_id, content_hash] of every active user, in user_id order, streamed. */
  activeUsers(): Iterable<readonly [string, string]>;
  /** Whether the open run loads an empty mirror (a first sync): it then has no active users. */
  loadsEmptyMirror(): boolean;
  /** [user_id, content_hash] of every user, deleted ones included, in user_id order, streamed. */
  allUsers(): Iterable<readonly [string, string]>;
  /** A first sync's: the user_id of every row it wrote so far, a repeat listing's too (none outside a first sync). */
  firstSyncUserIds(): Iterable<string>;
  /** The content_hash of a user's row now, or undefined if it has none. */
  contentHashOf(userId: string): string | undefined;
  clientIdsOf(userIds: readonly string[]): Array<{ user_id: string; client_user_id: string }>;
  /**
   * One page's new and changed listings, into the run's transaction, all or
   * nothing, each taken from `writes` only once the one before is stored.
   * `written` hears of each, with what its user's row held just before it
   * (undefined: no row).
   */
  writeUsers(runId: number, writes: Iterable<UserWrite>, written?: (write: UserWrite, prior: PriorRow | undefined) => void): void;
  /** Applies the confirmed deletions, counts the run's changes and makes the run visible. */
  publish(runId: number, deletions: PublishDeletions): PublishResult;
  /** Records how the run ended; an unpublished run is rolled back first. */
  /** Returns the schema drift pairs the run met for the first time (db/schema-drift.ts). */
  finishRun(runId: number, result: FinishRunInput): RunFieldWarning[];
}

export interface SqliteMirrorStoreOptions {
  clock?: () => Date;
  /** What a first sync into an empty mirror puts in the change feed (CHANGES_BASELINE); default one marker event. */
  baseline?: BaselineMode;
}

/**
 * Default page cache, KiB. It fills up on a large run and stays resident, so
 * it counts fully in the run's RSS (and SQLite sizes its sort buffers for
 * CREATE INDEX from it); a first sync writes mostly appended pages, which
 * gain nothing from a larger cache. Measured at 1M users, a process per run:
 * 4 MiB and 16 MiB took the same time within the machine's noise (first sync
 * 19.6-25.0 s against 24.6-26.2 s), with a peak RSS 12-24 MB lower. 8 MiB
 * keeps some room for runs that rewrite many rows in place.
 */
const CACHE_KIB = 8_192;

/** Deletions per statement. */
const DELETE_BATCH = 20_000;

interface OpenRun {
  id: number;
  /** Set on a first sync into an empty mirror (db/first-sync-load.ts). */
  bulk: BulkLoad | undefined;
}

export class SqliteMirrorStore implements MirrorStore {
  private run: OpenRun | undefined;
  private readonly clock: () => Date;
  private readonly records: RunRecords;
  private readonly keys: MirrorKeys;
  private readonly writes: UserWrites;
  private readonly load: FirstSyncLoad;
  private readonly feed: ChangeFeed;
  private readonly baseline: BaselineMode;
  private readonly s;
  readonly sources: RunSources;

  constructor(
    private readonly db: Db,
    options: SqliteMirrorStoreOptions = {},
  ) {
    this.clock = options.clock ?? (() => new Date());
    // The mirror's page cache; the run's dirty pages beyond it spill into the WAL (uncommitted).
    db.pragma(`cache_size = -${CACHE_KIB}`);
    // A first sync commits a WAL the size of the mirror; once checkpointed, give the disk back.
    db.pragma('journal_size_limit = 67108864');
    // The run's COMMIT makes it visible; copying the WAL into the file is left to the caller, after
    // the result is out (checkpointMirror in db/open.ts): on a first sync it is the size of the mirror.
    db.pragma('wal_autocheckpoint = 0');
    this.records = new RunRecords(db);
    this.sources = new RunSources(db);
    this.keys = new MirrorKeys(db);
    this.writes = new UserWrites(db);
    this.load = new FirstSyncLoad(db, this.writes);
    this.feed = new ChangeFeed(db);
    this.baseline = options.baseline ?? 'marker';
    this.s = {
      // Still active: a user soft-deleted since the run began (superseded, or online) stays as it is.
      recordDeletions: db.prepare<{ run: number; now: string; ids: string }>(
        `INSERT INTO user_changes (run_id, user_id, change, cause, at)
         SELECT @run, u.user_id, 'deleted', 'verified', @now FROM json_each(@ids) AS j JOIN users AS u ON u.user_id = j.value
         WHERE u.deleted_at IS NULL`,
      ),
      applyDeletions: db.prepare<{ now: string; ids: string }>(
        `UPDATE users SET deleted_at = @now WHERE user_id IN (SELECT value FROM json_each(@ids)) AND deleted_at IS NULL`,
      ),
    };
  }

  /**
   * Commits the run's row, then opens the run's write transaction, which
   * stays open until publish commits it or finishRun rolls it back. A run
   * left open on this connection is rolled back.
   */
  recordRun(): number {
    if (this.db.inTransaction) this.db.exec('ROLLBACK');
    this.run = undefined;
    const now = this.now();
    return this.db.transaction(() => this.records.start(now, undefined)).immediate();
  }

  lastListedTotal(): number | undefined {
    return this.records.lastListedTotal();
  }

  beginRun(totalAtStart?: number, recorded?: number): number {
    if (this.db.inTransaction) this.db.exec('ROLLBACK');
    this.run = undefined;
    const now = this.now();
    const id =
      recorded === undefined
        ? this.db.transaction(() => this.records.start(now, totalAtStart)).immediate()
        : (this.records.setTotalAtStart(recorded, totalAtStart), recorded);
    this.db.exec('BEGIN IMMEDIATE');
    try {
      this.writes.beginRun();
      this.run = { id, bulk: this.load.mirrorIsEmpty() ? this.load.begin() : undefined };
    } catch (err) {
      this.db.exec('ROLLBACK');
      throw err;
    }
    return id;
  }

  // A first sync's mirror was empty at the start (and its covering index is dropped until publish).
  activeUsers(): Iterable<readonly [string, string]> {
    return this.run?.bulk !== undefined ? [] : this.keys.activeUsers();
  }

  loadsEmptyMirror(): boolean {
    return this.run?.bulk !== undefined;
  }

  allUsers(): Iterable<readonly [string, string]> {
    return this.run?.bulk !== undefined ? [] : this.keys.allUsers();
  }

  firstSyncUserIds(): Iterable<string> {
    return this.run?.bulk !== undefined ? this.load.userIds() : [];
  }

  contentHashOf(userId: string): string | undefined {
    return this.keys.contentHashOf(userId);
  }

  clientIdsOf(userIds: readonly string[]): Array<{ user_id: string; client_user_id: string }> {
    return this.keys.clientIdsOf(userIds);
  }

  /** A savepoint: a page is applied whole or not at all. */
  writeUsers(runId: number, writes: Iterable<UserWrite>, written?: (write: UserWrite, prior: PriorRow | undefined) => void): void {
    const run = this.openRun(runId);
    const now = this.now();
    const { bulk } = run;
    this.db.transaction(() => {
      for (const write of writes) {
        // Into an empty mirror the only earlier rows are this run's (a repeat listing), settled at the publish.
        const prior = bulk === undefined ? this.writes.applyListed(runId, write, now) : this.load.insert(write, now);
        written?.(write, prior);
      }
    })();
  }

  /**
   * Ends the run's transaction with what is left to do: finish a first
   * sync's load, apply the confirmed deletions, count the changes, mark the
   * run published, COMMIT. If anything before the COMMIT throws, the run is
   * left as it was before publish, still open, for finishRun to roll back.
   */
  publish(runId: number, opts: PublishDeletions): PublishResult {
    const run = this.openRun(runId);
    const result = this.db.transaction((): PublishResult => {
      this.records.assertPublishable(runId);
      const now = this.now();
      const repeats = run.bulk === undefined ? 0 : this.load.finish(run.bulk, runId, now);
      let swept = 0;
      for (const batch of batches([...new Set(opts.deletions)], DELETE_BATCH)) {
        const ids = JSON.stringify(batch);
        this.writes.history.materializeAll(ids);
        this.s.recordDeletions.run({ run: runId, now, ids });
        swept += this.s.applyDeletions.run({ now, ids }).changes;
      }
      const counts = this.records.markPublished(runId, now, swept, opts.deletionsChecked);
      // The run's versions and source connections, from its change rows: visible with them. A first
      // sync into an empty mirror is the baseline instead, with no rows (db/history.ts).
      if (run.bulk !== undefined && this.writes.history.mayBeBaseline())
        this.writes.history.publishBaseline(runId, now, opts.deletionsChecked);
      else this.writes.history.publishRun(runId, now, opts.deletionsChecked);
      // The run's events, visible at the same COMMIT as its changes.
      if (run.bulk !== undefined && this.baseline === 'marker') this.feed.appendBaseline(runId, now, counts.created);
      else this.feed.appendRun(runId, now);
      return { ...counts, repeats, conflicts: this.writes.conflicts.snapshot() };
    })();
    this.db.exec('COMMIT');
    this.run = undefined;
    return result;
  }

  /** An unpublished run open on this store is rolled back: nothing of it reaches the mirror. */
  finishRun(runId: number, result: FinishRunInput): RunFieldWarning[] {
    if (this.run?.id === runId) {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      this.run = undefined;
    }
    const now = this.now();
    return this.db.transaction(() => this.records.finish(runId, now, result)).immediate();
  }

  private openRun(runId: number): OpenRun {
    const run = this.run;
    if (run?.id !== runId) throw new Error(`sync run ${runId} is not the run open on this store (${run?.id ?? 'none'})`);
    return run;
  }

  private now(): string {
    return this.clock().toISOString();
  }
}

function batches<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
