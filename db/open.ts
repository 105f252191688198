/**
 * Opens the mirror database: WAL (readers never block the writer and always
 * see a committed snapshot), a busy timeout (a second process waits instead
 * of failing with SQLITE_BUSY), and the schema migrated to the latest version.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { migrate, type Migration } from './migrate.js';
import { MIGRATIONS } from './migrations/index.js';

export type Db = Database.Database;

export interface OpenOptions {
  /** Open without writing: no migration, no directory creation. For analytics and offline resolve. */
  readonly?: boolean;
  /** How long a write waits for another connection's write lock before SQLITE_BUSY. */
  busyTimeoutMs?: number;
  /** The schema to migrate to; the mirror's by default (the audit file has its own, db/audit-migrations). */
  migrations?: readonly Migration[];
}

export const DEFAULT_BUSY_TIMEOUT_MS = 5_000;

export function openMirror(path: string, options: OpenOptions = {}): Db {
  if (!options.readonly && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path, { readonly: options.readonly ?? false, fileMustExist: options.readonly ?? false });
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS}`);
  if (!options.readonly) {
    db.pragma('journal_mode = WAL');
    // NORMAL is durable across process crashes in WAL mode; only an OS crash can lose the last commit.
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db, options.migrations ?? MIGRATIONS);
  }
  return db;
}
