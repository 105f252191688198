/**
 * What a mirror tells the mirrors that follow it (docs/followers.md), read
 * beside the replica's freshness in one statement per turn
 * (./replica-reader.ts): when its last published run published, when the data
 * it serves was read from the service, its feed's epoch and its last restore.
 *
 * `source_at` is the oldest time along a chain: a mirror that reads the
 * service gives its own publish time; a follower gives the time its leader
 * gave (sync_runs.source_at, migration 13), so a follower of a follower
 * still knows how old the data is where it was read.
 *
 * The columns come from migrations 7, 10 and 12; a file its writer has not
 * migrated yet (a readonly open never migrates) gives what it has.
 */
import type { Db } from './open.js';
import { hasTable } from './has-table.js';

export interface LineageFreshness {
  /** When the last published run published. */
  publishedAt: string;
  /** When the data it serves was read from the service. */
  sourceAt: string;
  /** The change feed's epoch (db/restore.ts draws another); '0' before the feed exists. */
  epoch: string;
  /** The last restore from a backup, if any. */
  restoredAt: string | undefined;
  /** The change feed's last issued cursor: a follower that listed this state tails the feed after it. */
  cursor: number | undefined;
}

export interface LineageRow {
  published_at?: string | null;
  source_at?: string | null;
  epoch?: string | null;
  restored_at?: string | null;
  cursor?: number | null;
}

const LAST_PUBLISHED = `FROM sync_runs WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT 1`;

function has(db: Db, table: string, column?: string): boolean {
  if (column === undefined) return hasTable(db, table);
  return db.prepare(`SELECT 1 FROM pragma_table_info(?) WHERE name = ?`).get(table, column) !== undefined;
}

/** The select-list tail (`, (…) AS published_at, …`) for the columns this file has. */
export function lineageColumns(db: Db): string {
  const source = has(db, 'sync_runs', 'source_at') ? 'coalesce(source_at, published_at)' : 'published_at';
  const parts = [`(SELECT published_at ${LAST_PUBLISHED}) AS published_at`, `(SELECT ${source} ${LAST_PUBLISHED}) AS source_at`];
  if (has(db, 'change_feed')) parts.push(`(SELECT epoch FROM change_feed WHERE id = 1) AS epoch`);
  if (has(db, 'mirror_lineage')) parts.push(`(SELECT max(at) FROM mirror_lineage WHERE event = 'restore') AS restored_at`);
  if (has(db, 'sqlite_sequence')) parts.push(`(SELECT seq FROM sqlite_sequence WHERE name = 'change_events') AS cursor`);
  return ', ' + parts.join(', ');
}

/** Undefined until a run published. */
export function lineageOf(row: LineageRow): LineageFreshness | undefined {
  if (row.published_at == null) return undefined;
  return {
    publishedAt: row.published_at,
    sourceAt: row.source_at ?? row.published_at,
    epoch: row.epoch ?? '0',
    restoredAt: row.restored_at ?? undefined,
    cursor: row.cursor ?? undefined,
  };
}
