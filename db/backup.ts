/**
 * A consistent copy of a live SQLite file (the mirror or the audit), taken
 * while syncs write and readers read. `VACUUM INTO` reads one snapshot in a
 * single read transaction: in WAL mode that blocks no writer (a checkpoint
 * just cannot pass the snapshot until the copy ends), and the copy is
 * compact, with no -wal of its own. It is written into a file created
 * private first (the file policy's mode, whatever the umask), checked, made
 * durable, and only then renamed to its name: a copy that exists under its
 * name is a good one.
 */
import { closeSync, fsyncSync, openSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { createPrivateFile } from './file-modes.js';
import { markBackup, type BackupMark } from './lineage.js';
import { readVersion } from './migrate.js';
import { openMirror, type Db } from './open.js';
import { AUDIT_MIGRATIONS } from './open-audit.js';
import { pidAlive } from './sync-lease.js';

export interface CopyFacts {
  path: string;
  bytes: number;
  schemaVersion: number;
  /** For a mirror: what the copy holds (db/lineage.ts); undefined for the audit. */
  mark: BackupMark | undefined;
  /** For a mirror: when history is complete since, and the newest change it records. */
  historySince: string | null;
  historyLatest: string | null;
  users: number | null;
  copyMs: number;
  checkMs: number;
}

class BackupCheckError extends Error {
  override name = 'BackupCheckError';
}

/**
 * Copies `source` to `dest` (which must not exist). `kind` 'mirror' marks
 * the copy as a backup taken now. Throws, leaving nothing at `dest`, when
 * the copy cannot be written or fails its check.
 */
export function copyDatabase(source: Db, dest: string, kind: 'mirror' | 'audit', now: () => Date = () => new Date()): CopyFacts {
  const tmp = partialName(dest, process.pid);
  rmSync(tmp, { force: true });
  createPrivateFile(tmp);
  try {
    const started = performance.now();
    source.prepare('VACUUM INTO ?').run(tmp);
    const copyMs = Math.round(performance.now() - started);
    const copy = new Database(tmp);
    let facts: Omit<CopyFacts, 'path' | 'bytes' | 'copyMs'>;
    try {
      const checked = performance.now();
      const mark = kind === 'mirror' ? markBackup(copy, now().toISOString()) : undefined;
      // A backup is one self-contained file: no -wal or -shm beside it, readable from a read-only folder.
      copy.pragma('journal_mode = DELETE');
      const problems = copy.pragma('quick_check', { simple: false }) as { quick_check: string }[];
      const first = problems[0]?.quick_check;
      if (first !== 'ok') throw new BackupCheckError(`the copy fails its check: ${first ?? 'no answer'}`);
      facts = { schemaVersion: readVersion(copy), mark, ...mirrorFacts(copy, kind), checkMs: Math.round(performance.now() - checked) };
    } finally {
      copy.close();
    }
    syncFile(tmp);
    renameSync(tmp, dest);
    syncFile(dirname(dest));
    return { path: dest, bytes: statSync(dest).size, copyMs, ...facts };
  } catch (err) {
    rmSync(tmp, { force: true });
    rmSync(`${tmp}-journal`, { force: true });
    throw err;
  }
}

/**
 * Copies the database at `sourcePath` (the mirror, or with 'audit' the
 * removal audit) to `dest`, through a read-only connection of its own:
 * `backup <dest>` and the scheduled backup (src/health/backup-folder.ts).
 */
export function backupDatabase(sourcePath: string, dest: string, kind: 'mirror' | 'audit'): CopyFacts {
  const db = openMirror(sourcePath, {
    readonly: true,
    variable: kind === 'audit' ? 'AUDIT_DB' : 'MIRROR_DB',
    ...(kind === 'audit' ? { migrations: AUDIT_MIGRATIONS } : {}),
  });
  try {
    return copyDatabase(db, dest, kind);
  } finally {
    db.close();
  }
}

/** The name a copy to `dest` has while process `pid` makes it. */
function partialName(dest: string, pid: number): string {
  return `${dest}.partial-${pid}`;
}

/** A copy in the making (partialName), or a -journal, -wal or -shm SQLite made beside one: its maker's pid. */
const PARTIAL = /\.partial-(\d+)(?:-journal|-wal|-shm)?$/;

/**
 * Removes from `dir` the copies in the making whose process no longer runs:
 * a backup killed mid-copy (SIGKILL, the OOM killer, the host down) leaves
 * its `.partial-<pid>`, as large as the mirror, and an export its folder
 * `.export-<time>.partial-<pid>` (src/export/run.ts), and nothing else would
 * ever remove them. One whose pid runs is never touched: a copy in progress
 * (the daemon's next tick, a system cron's), or a pid reused, which the next
 * attempt after that process ends removes. Returns the paths removed.
 */
export function removeStalePartials(dir: string, runs: (pid: number) => boolean = pidAlive): string[] {
  const removed: string[] = [];
  for (const name of readdirSync(dir)) {
    const pid = PARTIAL.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || runs(Number(pid))) continue;
    const path = join(dir, name);
    rmSync(path, { force: true, recursive: true });
    removed.push(path);
  }
  return removed;
}

function mirrorFacts(copy: Db, kind: 'mirror' | 'audit'): Pick<CopyFacts, 'historySince' | 'historyLatest' | 'users'> {
  if (kind === 'audit') return { historySince: null, historyLatest: null, users: null };
  const one = <T>(sql: string) => copy.prepare<[], T>(sql).pluck().get() ?? null;
  return {
    historySince: one<string | null>(`SELECT complete_since FROM history_state WHERE id = 1`),
    historyLatest: one<string | null>(`SELECT max(published_at) FROM sync_runs WHERE published_at IS NOT NULL`),
    users: one<number>(`SELECT count(*) FROM users WHERE deleted_at IS NULL`),
  };
}

/** fsync a file or a folder: a rename is durable only once its folder is. */
export function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
