/**
 * The sync_runs rows of a mirror file, read the way an operator would (a
 * separate read-only connection), and the "never two syncs at once" check
 * the multi-daemon tests share.
 */
import Database from 'better-sqlite3';
import { expect } from 'vitest';

export interface RunRow {
  id: number;
  status: string;
  started_at: string;
  finished_at: string | null;
  error: string | null;
}

export function readRuns(file: string): RunRow[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.prepare('SELECT id, status, started_at, finished_at, error FROM sync_runs ORDER BY id').all() as RunRow[];
  } finally {
    db.close();
  }
}

/** Each run finished before the next one started. */
export function expectRunsNeverOverlap(runs: readonly RunRow[]): void {
  for (let i = 1; i < runs.length; i++) {
    const prev = runs[i - 1];
    const cur = runs[i];
    if (prev === undefined || cur === undefined) continue;
    expect(prev.finished_at).not.toBeNull();
    expect(cur.started_at >= (prev.finished_at ?? '')).toBe(true);
  }
}
