import type Database from 'better-sqlite3';
import { isBusy } from './busy-retry.js';

/**
 * Versioned migrations keyed on `PRAGMA user_version`. Each migration runs in
 * its own transaction together with the version bump, so a crash mid-way
 * leaves the previous version intact and the next open retries it; the
 * version is checked inside that transaction, so processes opening a file at
 * the same time apply each migration once.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/**
 * A file at a schema version this build does not know: written by a newer
 * build. Refused by every open, read-only ones included, because an older
 * build cannot keep what the newer one maintains (a rollback that syncs
 * would write changes its history never records).
 */
export class SchemaTooNewError extends Error {
  override name = 'SchemaTooNewError';
  constructor(
    readonly fileVersion: number,
    readonly buildVersion: number,
  ) {
    super(
      `schema version ${fileVersion} is newer than this build's ${buildVersion}: a newer user-mirror wrote it; ` +
        `run that version, or restore a backup this version can read`,
    );
  }
}

/** The newest version `migrations` reach: this build's schema. */
export function latestVersion(migrations: readonly Migration[]): number {
  return migrations.reduce((max, m) => Math.max(max, m.version), 0);
}

/** Throws SchemaTooNewError when the file's version is above what `migrations` reach. */
export function refuseNewerSchema(db: Database.Database, migrations: readonly Migration[]): void {
  const file = readVersion(db);
  const build = latestVersion(migrations);
  if (file > build) throw new SchemaTooNewError(file, build);
}

export function migrate(db: Database.Database, migrations: readonly Migration[]): number {
  refuseNewerSchema(db, migrations);
  let current = readVersion(db);
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (m.version <= current) continue;
    current = applyMigration(db, m);
  }
  return current;
}

/**
 * Applies `m` unless the file is already at its version; returns the file's version after.
 *
 * The caller's "not applied yet" came from a read without the lock. When two processes open a new
 * file at once, the other may have applied `m` since, and then started a sync, which holds the write
 * lock for its whole run: waiting for that lock ends in SQLITE_BUSY. A file that has reached `m`
 * meanwhile is what we wanted, so a busy lock only fails the open when the migration is still missing.
 */
export function applyMigration(db: Database.Database, m: Migration): number {
  try {
    return db
      .transaction((): number => {
        // Read again under the write lock: two processes opening a new file at once both saw the old version.
        const now = readVersion(db);
        if (m.version <= now) return now;
        db.exec(m.sql);
        db.pragma(`user_version = ${m.version}`);
        return m.version;
      })
      .immediate();
  } catch (err) {
    const now = isBusy(err) ? readVersion(db) : -1;
    if (m.version <= now) return now;
    throw err;
  }
}

export function readVersion(db: Database.Database): number {
  return db.pragma('user_version', { simple: true }) as number;
}
