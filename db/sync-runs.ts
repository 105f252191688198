/**
 * The rows that describe sync runs: `sync_runs` (one per run) and
 * `rejected_records` (what a run could not accept). A run's row is committed
 * on its own when the run starts, so that a run killed mid-way still leaves
 * a trace, and finished when it ends.
 */
import { hostname } from 'node:os';
import type { Db } from './open.js';
import type { Cell } from './user-writes.js';
import type { IdentityConflict } from './identity-conflicts.js';
import { recordRunDrift, type RunFieldWarning } from './schema-drift.js';

type Bind = Record<string, Cell>;

type RunStatus = 'succeeded' | 'partial' | 'failed';

/** What became of the active users a run did not list (src/sync/deletions.ts). */
export interface CandidateCounts {
  /** Active users missing from the listing. */
  candidates: number;
  /** Confirmed gone upstream (and deleted, unless something else deleted them first). */
  confirmedGone: number;
  /** Still there upstream: the listing skipped them. Kept. */
  stillThere: number;
  /** Resolve failed after retries. Kept, checked again next run. */
  unverified: number;
  /** Beyond SYNC_MAX_VERIFY, or held back with the whole run. Kept, checked again next run. */
  deferred: number;
}

/** A run with no deletion candidates, or one that never got to count them. */
export const NO_CANDIDATES: CandidateCounts = { candidates: 0, confirmedGone: 0, stillThere: 0, unverified: 0, deferred: 0 };

/** One rejected record as stored. */
export interface RejectedRow {
  offset: number;
  index: number;
  userId: string | null;
  clientUserId: string | null;
  reason: string;
  /** JSON text. */
  raw: string;
  at: string;
}

export interface FinishRunInput {
  status: RunStatus;
  totalAtEnd?: number;
  pages: number;
  usersSeen: number;
  error?: string;
  created?: number;
  updated?: number;
  deleted?: number;
  /** Defaults to the rejected records stored for the run. */
  rejected?: number;
  duplicates?: number;
  sweepSkippedReason?: string;
  candidates?: CandidateCounts;
  /** Anomalies of the scan (migration 8): identity conflicts, oversize pages, the lowest `total` a page reported. */
  identityConflicts?: number;
  oversizePages?: number;
  totalLowest?: number;
  /** Rejected records to store with the run's final row. */
  rejectedRecords?: readonly RejectedRow[];
  /** The identity conflicts kept with their ids (db/identity-conflicts.ts), stored with the run's final row (migration 11). */
  conflictIds?: readonly IdentityConflict[];
  /** A published run's schema drift (db/schema-drift.ts, migration 12), stored with its final row. */
  fieldWarnings?: readonly RunFieldWarning[];
}

/** A published run's changes, as its user_changes rows count them. */
export interface ChangeCounts {
  created: number;
  updated: number;
  /** Confirmed deletions plus superseded. */
  deleted: number;
  /** Of `deleted`: active users whose (team_id, client_user_id) a newer record took over. */
  superseded: number;
}

/** Whether any sync has been recorded in this mirror (a brand-new one has none); throws when the mirror cannot be read. */
export function hasRecordedRun(db: Db): boolean {
  return db.prepare('SELECT EXISTS (SELECT 1 FROM sync_runs)').pluck().get() === 1;
}

export class RunRecords {
  private readonly s;

  constructor(private readonly db: Db) {
    this.s = {
      interruptRuns: db.prepare<Bind>(
        `UPDATE sync_runs SET status = 'failed', finished_at = @now,
           error = CASE WHEN published_at IS NULL THEN 'interrupted' ELSE 'interrupted after publish' END
         WHERE status = 'running'`,
      ),
      insertRun: db.prepare<Bind>(
        `INSERT INTO sync_runs (started_at, status, total_at_start, pid, host) VALUES (@now, 'running', @total, @pid, @host)`,
      ),
      lastListedTotal: db
        .prepare<[], number | null>(`SELECT total_at_end FROM sync_runs WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT 1`)
        .pluck(),
      setTotalAtStart: db.prepare<Bind>(`UPDATE sync_runs SET total_at_start = @total WHERE id = @run`),
      runState: db.prepare<[number], { status: string; published_at: string | null }>(
        `SELECT status, published_at FROM sync_runs WHERE id = ?`,
      ),
      finishRun: db.prepare<Bind>(
        `UPDATE sync_runs SET status = @status, finished_at = @now, total_at_end = @totalAtEnd, pages = @pages,
           users_seen = @usersSeen, error = @error,
           created = coalesce(@created, created), updated = coalesce(@updated, updated), deleted = coalesce(@deleted, deleted),
           rejected = coalesce(@rejected, (SELECT count(*) FROM rejected_records WHERE run_id = @run)),
           duplicates = @duplicates, sweep_skipped_reason = @sweepSkippedReason,
           candidates = @candidates, confirmed_gone = @confirmedGone, still_there = @stillThere,
           unverified = @unverified, deferred = @deferred,
           identity_conflicts = @identityConflicts, oversize_pages = @oversizePages, total_lowest = @totalLowest
         WHERE id = @run`,
      ),
      insertRejected: db.prepare<Bind>(
        `INSERT INTO rejected_records (run_id, page_offset, record_index, user_id, client_user_id, reason, raw, at)
         VALUES (@run, @offset, @index, @userId, @clientUserId, @reason, @raw, @at)`,
      ),
      insertConflict: db.prepare<Bind>(
        `INSERT INTO identity_conflicts (run_id, kind, user_id, team_id, client_user_id, earlier, later, at)
         VALUES (@run, @kind, @userId, @teamId, @clientUserId, @earlier, @later, @at)`,
      ),
      countChanges: db.prepare<[number], { change: string; n: number }>(
        `SELECT change, count(*) AS n FROM user_changes WHERE run_id = ? GROUP BY change`,
      ),
      markPublished: db.prepare<Bind>(
        `UPDATE sync_runs SET created = @created, updated = @updated, deleted = @deleted, superseded = @superseded,
           swept = @swept, published_at = @now
         WHERE id = @run`,
      ),
    };
  }

  /**
   * Any run still 'running' is left over from a process that died (one
   * writer per mirror file is assumed): it becomes 'failed' / 'interrupted'.
   * Then the new run's row. Call inside a transaction.
   */
  start(now: string, totalAtStart: number | undefined): number {
    this.s.interruptRuns.run({ now });
    const inserted = this.s.insertRun.run({ now, total: totalAtStart ?? null, pid: process.pid, host: hostname() });
    return Number(inserted.lastInsertRowid);
  }

  /** `total` as the first page said it, on a run recorded before that page came. */
  /** The last published run's `total_at_end`: what a new run's first requests are planned from. */
  lastListedTotal(): number | undefined {
    return this.s.lastListedTotal.get() ?? undefined;
  }

  setTotalAtStart(runId: number, total: number | undefined): void {
    this.s.setTotalAtStart.run({ run: runId, total: total ?? null });
  }

  /** Throws unless the run is running and unpublished: publishing twice would double its changes. */
  assertPublishable(runId: number): void {
    const state = this.s.runState.get(runId);
    if (state === undefined || state.status !== 'running' || state.published_at !== null) {
      throw new Error(`sync run ${runId} is not a running, unpublished run`);
    }
  }

  /** Counts the run's change rows and marks it published. Call inside the run's transaction. */
  markPublished(runId: number, now: string, swept: number, deletionsChecked: boolean): ChangeCounts {
    const counts = { created: 0, updated: 0, deleted: 0 };
    for (const { change, n } of this.s.countChanges.all(runId)) {
      if (change === 'created' || change === 'updated' || change === 'deleted') counts[change] = n;
    }
    // Every deletion not confirmed upstream was a key taken over.
    const superseded = counts.deleted - swept;
    this.s.markPublished.run({ run: runId, now, ...counts, superseded, swept: deletionsChecked ? 1 : 0 });
    return { ...counts, superseded };
  }

  /** The run's final row, its rejected records and its drift; returns the pairs met for the first time. Call inside a transaction. */
  finish(runId: number, now: string, result: FinishRunInput): RunFieldWarning[] {
    for (const r of result.rejectedRecords ?? []) this.s.insertRejected.run({ run: runId, ...r });
    for (const c of result.conflictIds ?? []) {
      const ids =
        c.kind === 'user_id'
          ? { userId: c.userId, teamId: null, clientUserId: null }
          : { userId: null, teamId: c.teamId, clientUserId: c.clientUserId };
      this.s.insertConflict.run({ run: runId, kind: c.kind, ...ids, earlier: c.earlier, later: c.later, at: now });
    }
    this.s.finishRun.run({
      run: runId,
      now,
      status: result.status,
      totalAtEnd: result.totalAtEnd ?? null,
      pages: result.pages,
      usersSeen: result.usersSeen,
      error: result.error ?? null,
      created: result.created ?? null,
      updated: result.updated ?? null,
      deleted: result.deleted ?? null,
      rejected: result.rejected ?? null,
      duplicates: result.duplicates ?? 0,
      sweepSkippedReason: result.sweepSkippedReason ?? null,
      ...(result.candidates ?? NO_CANDIDATES),
      identityConflicts: result.identityConflicts ?? 0,
      oversizePages: result.oversizePages ?? 0,
      totalLowest: result.totalLowest ?? null,
    });
    return result.status === 'failed' ? [] : recordRunDrift(this.db, runId, now, result.fieldWarnings ?? []);
  }
}
