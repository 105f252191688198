/**
 * Versioned migrations keyed on `PRAGMA user_version`. Each migration runs in
 * its own transaction together with the version bump, so a crash mid-way
 * leaves the previous version intact and the next open retries it; the
 * version is checked inside that transaction, so processes opening a file at
 * the same time apply each migration once.
 */
import type Database from 'better-sqlite3';
import { MIGRATIONS } from './migrations/index.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function migrate(db: Database.Database, migrations: readonly Migration[] = MIGRATIONS): number {
  const version = (): number => db.pragma('user_version', { simple: true }) as number;
  let current = version();
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (m.version <= current) continue;
    current = db
      .transaction((): number => {
        // Read again under the write lock: two processes opening a new file at once both saw the old version.
        const now = version();
        if (m.version <= now) return now;
        db.exec(m.sql);
        db.pragma(`user_version = ${m.version}`);
        return m.version;
      })
      .immediate();
  }
  return current;
}
