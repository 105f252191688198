/**
 * Opens the mirror database: WAL (readers never block the writer and always
 * see a committed snapshot), a busy timeout (a second process waits instead
 * of failing with SQLITE_BUSY), and the schema migrated to the latest version.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { migrate } from './migrate.js';

export type Db = Database.Database;

export interface OpenOptions {
  /** Open without writing: no migration, no directory creation. For analytics and offline resolve. */
  readonly?: boolean;
  busyTimeoutMs?: number;
}

export function openMirror(path: string, options: OpenOptions = {}): Db {
  if (!options.readonly && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path, { readonly: options.readonly ?? false, fileMustExist: options.readonly ?? false });
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5_000}`);
  if (!options.readonly) {
    db.pragma('journal_mode = WAL');
    // NORMAL is durable across process crashes in WAL mode; only an OS crash can lose the last commit.
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db);
  }
  return db;
}
