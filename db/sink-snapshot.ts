/**
 * What a destination outside the host (the PostgreSQL sink) reads from the
 * mirror: one read snapshot of its present and its history, with the feed
 * position that snapshot reaches (a baseline), and the feed after a cursor
 * (the applies). Read-only; SQLite stays in db/.
 *
 * The snapshot is one read transaction: every table is read as of the same
 * commit, and `position.cursor` is the last event that commit holds, so a
 * destination that loads the snapshot and then applies the feed after that
 * cursor misses nothing and applies nothing twice. Rows are handed out one
 * table at a time by iterators (a million users never sit in memory); the
 * caller reads each to its end (or closes the snapshot) before the next.
 * Hold it no longer than the load: an open read transaction stops the WAL's
 * checkpoint.
 */
import { ChangeFeed, type FeedPage } from './change-feed.js';
import type { SourceConnection, UserVersion } from './history-reader.js';
import { lastCursor } from './lineage.js';
import { openMirror, type Db } from './open.js';
import { hasTable } from './has-table.js';
import type { SourceRow, UserRowOut } from './user-row.js';

/** Where a snapshot or a feed page leaves the destination: the feed's epoch and last cursor, and history's start. */
export interface FeedPosition {
  cursor: number;
  epoch: string;
  /** history_state.complete_since: before it, history does not know. */
  completeSince: string | null;
}

export type SnapshotSource = SourceRow;

/** A row of the view `user_history`, but an open version's `raw` NULL (its record is the users row's). */
export type SnapshotVersion = Pick<UserVersion, 'user_id' | 'team_id' | 'client_user_id' | 'raw' | 'valid_from' | 'valid_to' | 'end_cause'>;

/** A row of the view `source_history`. */
export type SnapshotConnection = Pick<
  SourceConnection,
  'user_id' | 'slug' | 'created_on' | 'connected_at' | 'disconnected_at' | 'ended_by'
>;

/**
 * The users' columns in the order a destination loads them. `deleted_at`
 * is the publish of the deletion (see UserRowOut), read only for deleted
 * users through the index on `(user_id, valid_from)`.
 */
const USERS_SQL = `SELECT u.user_id, u.team_id, u.client_user_id, u.created_on,
    u.fallback_time_zone_id, u.fallback_time_zone_source_slug, u.fallback_time_zone_updated_at,
    u.fallback_birth_date, u.fallback_birth_date_source_slug, u.fallback_birth_date_updated_at,
    u.ingestion_start, u.ingestion_end, u.raw,
    CASE WHEN u.deleted_at IS NULL THEN NULL ELSE coalesce(
      (SELECT max(v.valid_to) FROM user_versions AS v WHERE v.user_id = u.user_id AND v.ended_in_deletion = 1), u.deleted_at) END AS deleted_at
  FROM users AS u`;

/**
 * The rows of the views `user_history` and `source_history` (migration 9),
 * but each baseline user's implicit version and connections read in the
 * order of `users`' rowids: the views' own plan reaches `users` through an
 * index, one random ~1 KB row (with its overflow pages) per user or per
 * source. And an open version's `raw` is NULL here, as the table holds it:
 * its record is the users row's, which the destination does not copy
 * either. test/postgres-sink.test.ts compares the result with the views.
 */
const BASELINE_USER = `h.baseline_at IS NOT NULL AND u.first_seen_at <= h.baseline_at AND u.deleted_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM user_versions AS x WHERE x.user_id = u.user_id)`;
const VERSIONS_SQL = `SELECT user_id, team_id, client_user_id, raw, valid_from, valid_to, end_cause FROM user_versions
  UNION ALL
  SELECT u.user_id, u.team_id, u.client_user_id, NULL, h.baseline_at, NULL, NULL
  FROM history_state AS h CROSS JOIN users AS u NOT INDEXED WHERE ${BASELINE_USER}`;
const CONNECTIONS_SQL = `SELECT user_id, slug, created_on, connected_at, disconnected_at, ended_by FROM source_connections
  UNION ALL
  SELECT c.user_id, c.slug, c.created_on, h.baseline_at, NULL, NULL
  FROM history_state AS h CROSS JOIN users AS u NOT INDEXED CROSS JOIN connected_sources AS c
  WHERE c.user_id = u.user_id AND ${BASELINE_USER}`;

export interface MirrorSnapshot {
  readonly position: FeedPosition;
  users(): IterableIterator<UserRowOut>;
  sources(): IterableIterator<SnapshotSource>;
  versions(): IterableIterator<SnapshotVersion>;
  connections(): IterableIterator<SnapshotConnection>;
  /** Ends the read transaction and closes the file. */
  close(): void;
}

/** Opens the mirror read-only and begins the snapshot: everything read through it is one commit's. */
export function openMirrorSnapshot(path: string): MirrorSnapshot {
  const db = openMirror(path, { readonly: true });
  try {
    requireFeed(db);
    db.exec('BEGIN');
    // The first read fixes the snapshot: the position and every row after it are that commit's.
    const position = readPosition(db);
    return {
      position,
      users: () => db.prepare<[], UserRowOut>(USERS_SQL).iterate(),
      sources: () =>
        db.prepare<[], SnapshotSource>(`SELECT user_id, slug, name, logo, created_on, descriptor FROM connected_sources`).iterate(),
      versions: () => db.prepare<[], SnapshotVersion>(VERSIONS_SQL).iterate(),
      connections: () => db.prepare<[], SnapshotConnection>(CONNECTIONS_SQL).iterate(),
      close() {
        if (db.inTransaction) db.exec('COMMIT');
        db.close();
      },
    };
  } catch (err) {
    db.close();
    throw err;
  }
}

/** The feed of a mirror, read a page at a time after a cursor; open it for a pass and close it (a restore replaces the file). */
export interface FeedReader {
  /** The feed's epoch and last cursor now, and history's start. */
  position(): FeedPosition;
  /** Events after `after`, at most `limit` (db/change-feed.ts `page`: `gone` when retention or a restore dropped what follows). */
  page(after: number, limit: number): FeedPage;
  close(): void;
}

export function openFeedReader(path: string): FeedReader {
  const db = openMirror(path, { readonly: true });
  try {
    requireFeed(db);
    const feed = new ChangeFeed(db);
    return {
      position: () => readPosition(db),
      page: (after, limit) => feed.page(after, limit),
      close: () => db.close(),
    };
  } catch (err) {
    db.close();
    throw err;
  }
}

function readPosition(db: Db): FeedPosition {
  const epoch = db.prepare<[], string>(`SELECT epoch FROM change_feed WHERE id = 1`).pluck().get() ?? '0';
  const completeSince = db.prepare<[], string | null>(`SELECT complete_since FROM history_state WHERE id = 1`).pluck().get() ?? null;
  return { cursor: lastCursor(db), epoch, completeSince };
}

/** A mirror a daemon has not yet migrated to the feed and history (version 9) cannot be read this way. */
function requireFeed(db: Db): void {
  if (!hasTable(db, 'change_feed') || !hasTable(db, 'history_state'))
    throw new Error('the mirror has no change feed or history yet: let the daemon (or a sync) open it once to migrate it');
}
