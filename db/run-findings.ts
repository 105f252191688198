/**
 * What the newest published run left the mirror at odds with the service's
 * listing, for `status` and /metrics: its records that were not stored
 * (`rejected_records`), and its identity conflicts (`identity_conflicts`,
 * migration 11) whose losing id the mirror still does not answer as listed
 * (`resolve` of the earlier client_user_id exits 3; the earlier user is
 * stored deleted). Read-only; a mirror written before a table reads as none.
 */
import { hasTable } from './has-table.js';
import type { Db } from './open.js';

/** Rows shown per kind: enough to act on, short enough for a status page. */
const SHOWN = 10;

export interface RejectedFinding {
  offset: number;
  index: number;
  userId: string | null;
  clientUserId: string | null;
  reason: string;
}

export type ConflictFinding =
  | { kind: 'user_id'; userId: string; earlier: string; later: string }
  | { kind: 'client_user_id'; clientUserId: string; earlier: string; later: string };

export interface RunFindings {
  /** The newest published run (succeeded or partial): the mirror as readers see it. */
  runId: number;
  finishedAt: string | null;
  /** Records the run listed but could not store (`sync_runs.rejected`); the first SHOWN of those stored. */
  rejected: number;
  rejectedRecords: RejectedFinding[];
  /** Identity conflicts of the run (`sync_runs.identity_conflicts`). */
  conflicts: number;
  /** Of those kept with ids, the ones whose losing id the mirror still does not hold as the service listed it (all of them counted; the first SHOWN). */
  standing: number;
  standingConflicts: ConflictFinding[];
}

interface ConflictRow {
  kind: 'user_id' | 'client_user_id';
  user_id: string | null;
  client_user_id: string | null;
  earlier: string;
  later: string;
}

/** The newest published run's findings; undefined before any run published. */
export function newestRunFindings(db: Db): RunFindings | undefined {
  const run = db
    .prepare<[], { id: number; finished_at: string | null; rejected: number; identity_conflicts: number | null }>(
      `SELECT * FROM sync_runs WHERE published_at IS NOT NULL AND status <> 'running' ORDER BY id DESC LIMIT 1`,
    )
    .get();
  if (run === undefined) return undefined;
  const rejectedRecords = db
    .prepare<
      [number, number],
      { page_offset: number; record_index: number; user_id: string | null; client_user_id: string | null; reason: string }
    >(`SELECT page_offset, record_index, user_id, client_user_id, reason FROM rejected_records WHERE run_id = ? ORDER BY id LIMIT ?`)
    .all(run.id, SHOWN)
    .map((r) => ({ offset: r.page_offset, index: r.record_index, userId: r.user_id, clientUserId: r.client_user_id, reason: r.reason }));
  let standing = 0;
  let standingConflicts: ConflictFinding[] = [];
  if (hasTable(db, 'identity_conflicts')) {
    // Standing: the mirror has no active row holding the losing identity as it was listed.
    const where = `c.run_id = ? AND NOT EXISTS (SELECT 1 FROM users AS u WHERE u.deleted_at IS NULL AND (
        (c.kind = 'user_id' AND u.user_id = c.user_id AND u.client_user_id = c.earlier) OR
        (c.kind = 'client_user_id' AND u.user_id = c.earlier AND u.client_user_id = c.client_user_id)))`;
    standing = db.prepare<[number], number>(`SELECT count(*) FROM identity_conflicts AS c WHERE ${where}`).pluck().get(run.id) ?? 0;
    standingConflicts = db
      .prepare<[number, number], ConflictRow>(
        `SELECT c.kind, c.user_id, c.client_user_id, c.earlier, c.later FROM identity_conflicts AS c WHERE ${where} ORDER BY c.id LIMIT ?`,
      )
      .all(run.id, SHOWN)
      .map((c) =>
        c.kind === 'user_id'
          ? { kind: 'user_id', userId: c.user_id ?? '', earlier: c.earlier, later: c.later }
          : { kind: 'client_user_id', clientUserId: c.client_user_id ?? '', earlier: c.earlier, later: c.later },
      );
  }
  return {
    runId: run.id,
    finishedAt: run.finished_at,
    rejected: run.rejected,
    rejectedRecords,
    conflicts: run.identity_conflicts ?? 0,
    standing,
    standingConflicts,
  };
}
