/**
 * Versioned migrations keyed on `PRAGMA user_version`. Each migration runs in
 * its own transaction together with the version bump, so a crash mid-way
 * leaves the previous version intact and the next open retries it.
 */
import type Database from 'better-sqlite3';
import { MIGRATIONS } from './migrations/index.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function migrate(db: Database.Database, migrations: readonly Migration[] = MIGRATIONS): number {
  let current = db.pragma('user_version', { simple: true }) as number;
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    }).immediate();
    current = m.version;
  }
  return current;
}
