/**
 * Schema drift as the mirror keeps it (migration 12): per published run, the
 * records written that carried each (field, rule) warning, and every pair the
 * mirror has met with the run that met it first. The sync writes a run's
 * counts with its final row (./sync-runs.ts); `status` reads the newest
 * published run's, and the daemon's counter adds up the runs it has not
 * counted yet. Read paths treat a mirror without the tables as having none.
 */
import { hasTable } from './has-table.js';
import type { Db } from './open.js';

/** Records of one run that carried one (field, rule) warning; `field` is a top-level name. */
export interface RunFieldWarning {
  field: string;
  rule: string;
  records: number;
}

/** The newest published run's drift, for `status`. */
export interface RunDrift {
  runId: number;
  /** Records with a warning of each rule (a record with two rules counts in both). */
  byRule: Array<{ rule: string; records: number }>;
  /** Pairs this run met first. */
  newPairs: RunFieldWarning[];
}

/**
 * Stores a published run's counts and returns the pairs the mirror meets for
 * the first time. Call inside the transaction that writes the run's final row.
 */
export function recordRunDrift(db: Db, runId: number, now: string, counts: readonly RunFieldWarning[]): RunFieldWarning[] {
  if (counts.length === 0) return [];
  const insertCount = db.prepare(`INSERT INTO run_field_warnings (run_id, field, rule, records, at) VALUES (?, ?, ?, ?, ?)`);
  const insertSeen = db.prepare(`INSERT OR IGNORE INTO schema_drift (field, rule, first_run_id, first_seen_at) VALUES (?, ?, ?, ?)`);
  const fresh: RunFieldWarning[] = [];
  for (const c of counts) {
    insertCount.run(runId, c.field, c.rule, c.records, now);
    if (insertSeen.run(c.field, c.rule, runId, now).changes === 1) fresh.push({ field: c.field, rule: c.rule, records: c.records });
  }
  return fresh;
}

/** The newest published run's drift; undefined before any run published or on a mirror without the tables. */
export function newestRunDrift(db: Db): RunDrift | undefined {
  if (!hasTable(db, 'schema_drift')) return undefined;
  const runId = lastFinishedRunId(db);
  if (runId === 0) return undefined;
  const byRule = db
    .prepare<[number], { rule: string; records: number }>(
      `SELECT rule, sum(records) AS records FROM run_field_warnings WHERE run_id = ? GROUP BY rule ORDER BY records DESC, rule`,
    )
    .all(runId);
  const newPairs = db
    .prepare<[number], RunFieldWarning>(
      `SELECT d.field, d.rule, coalesce(w.records, 0) AS records FROM schema_drift AS d
       LEFT JOIN run_field_warnings AS w ON w.run_id = d.first_run_id AND w.field = d.field AND w.rule = d.rule
       WHERE d.first_run_id = ? ORDER BY d.field, d.rule`,
    )
    .all(runId);
  return { runId, byRule, newPairs };
}

/** The newest finished published run's id; 0 before any. Its drift rows are written with its final row. */
export function lastFinishedRunId(db: Db): number {
  return (
    db.prepare<[], number | null>(`SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL AND status <> 'running'`).pluck().get() ?? 0
  );
}

/** Counts of finished published runs after `afterRunId`, and the newest run id among them: what a counter has not added yet. */
export function driftSince(db: Db, afterRunId: number): { lastRunId: number; counts: RunFieldWarning[] } {
  const lastRunId = lastFinishedRunId(db);
  if (lastRunId <= afterRunId || !hasTable(db, 'schema_drift')) return { lastRunId: Math.max(lastRunId, afterRunId), counts: [] };
  const counts = db
    .prepare<[number, number], RunFieldWarning>(
      `SELECT field, rule, sum(records) AS records FROM run_field_warnings WHERE run_id > ? AND run_id <= ? GROUP BY field, rule`,
    )
    .all(afterRunId, lastRunId);
  return { lastRunId, counts };
}

/** A (field, rule) pair the mirror has met, and when it met it first. */
export interface DriftPair {
  field: string;
  rule: string;
  firstSeenAt: string;
}

/** The `limit` pairs met most recently; none on a mirror without the tables. */
export function driftPairs(db: Db, limit: number): DriftPair[] {
  if (!hasTable(db, 'schema_drift')) return [];
  return db
    .prepare<[number], DriftPair>(
      `SELECT field, rule, first_seen_at AS firstSeenAt FROM schema_drift ORDER BY first_seen_at DESC, field, rule LIMIT ?`,
    )
    .all(limit);
}
