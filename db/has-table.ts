/** Whether a mirror or audit file has `name` as a table: readers of older files treat a missing table as none. */
import type { Db } from './open.js';

export function hasTable(db: Db, name: string): boolean {
  return db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name) !== undefined;
}
