/**
 * Reading the mirror for an export (src/export/): the current users with
 * their sources, the versions and source connections of history, and the
 * change feed's events, each streamed row by row (`.iterate()`), never a
 * table in memory, and all from ONE read snapshot: `open` begins a read
 * transaction and pins it with its first read, so the files of one export
 * agree with each other and with the facts (cursor, time) its manifest
 * records, whatever the daemon publishes meanwhile.
 *
 * The snapshot is held until `close`: like any long read it delays the
 * WAL's checkpoint until then (db/SCHEMA.md, Reading it safely).
 */
import type { Db } from './open.js';
import { hasTable } from './has-table.js';
import { readHistoryGaps, type HistoryGap } from './lineage.js';
import type { SourceConnection, UserVersion } from './history-reader.js';
import type { UserRowOut } from './user-row.js';

/** What an export records about the snapshot it read: enough to continue from it (an incremental export). */
export interface SnapshotFacts {
  /** `PRAGMA user_version`: the mirror's schema version. */
  schemaVersion: number;
  /** The change feed's epoch: cursors of another epoch are another feed's. */
  epoch: string | null;
  /** The last change feed cursor the snapshot holds (0 when none yet). */
  cursor: number;
  /** The latest publish the snapshot holds (a run's, or an online resolve's): every history time is at or before it. */
  at: string | null;
  /** The latest run that published. */
  runId: number | null;
  /** When history became complete (history_state.complete_since); null before a first complete sync. */
  historySince: string | null;
  /** Spans restores left blank in history. */
  gaps: HistoryGap[];
}

/** One version of a user (`user_history`). */
export type ExportVersionRow = UserVersion;

/** One connection of a source to a user (`source_history`), with its row id and the runs of its ends. */
export interface ExportSourceRow extends SourceConnection {
  id: number | null;
  opened_run: number | null;
  closed_run: number | null;
}

/** One change feed event (`change_events`). */
export interface ExportChangeRow {
  cursor: number;
  type: string;
  run_id: number | null;
  user_id: string | null;
  at: string;
  body: string;
}

/** Which rows of history an export wants: all, those a window of time touched, or the directory as it was at a time. */
export type HistoryWindow =
  | { kind: 'all' }
  /** Rows that began or ended after `after` (an incremental export: what changed since the last one). */
  | { kind: 'since'; after: string }
  /** Rows that had begun by `at`; their end when later than `at` is not yet known then (NULL). */
  | { kind: 'as-of'; at: string };

/** The separator of `UserRowOut.sources`: a slug never holds a control character. */
export const SLUG_SEPARATOR = '\u001f';

const USER_COLUMNS = `u.user_id, u.team_id, u.client_user_id, u.created_on, u.fallback_time_zone_id, u.fallback_time_zone_source_slug,
  u.fallback_time_zone_updated_at, u.fallback_birth_date, u.fallback_birth_date_source_slug, u.fallback_birth_date_updated_at,
  u.ingestion_start, u.ingestion_end, u.first_seen_at, u.last_seen_at, u.deleted_at`;
const USER_SOURCES = `(SELECT group_concat(slug, char(31)) FROM (SELECT slug FROM connected_sources WHERE user_id = u.user_id ORDER BY slug)) AS sources`;

/**
 * The rows of the views `user_history` and `source_history` (migration 9), read in the order of the tables'
 * rowids rather than through the views' plan, which reaches `users` through its index: one random ~1 KB row
 * (with its overflow pages) per open version and per baseline user or connection. Here `users` is scanned
 * once, NOT INDEXED, and the small history rows are found by their indexes. The same rows as the views
 * (test/export.test.ts compares them), in another order.
 */
const BASELINE_USER = `h.baseline_at IS NOT NULL AND u.first_seen_at <= h.baseline_at AND u.deleted_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM user_versions AS x WHERE x.user_id = u.user_id)`;
const VERSION_COLUMNS = `v.id, v.user_id, v.team_id, v.client_user_id`;
const VERSION_TAIL = `v.valid_from, v.valid_to, v.opened_run, v.closed_run, v.end_cause, v.ended_in_deletion, v.backfilled`;
const VERSIONS_SQL = `SELECT ${VERSION_COLUMNS}, v.raw, ${VERSION_TAIL} FROM user_versions AS v
    WHERE v.raw IS NOT NULL AND ${windowWhere('v.valid_from', 'v.valid_to')}
  UNION ALL
  SELECT ${VERSION_COLUMNS}, u.raw, ${VERSION_TAIL} FROM users AS u NOT INDEXED JOIN user_versions AS v ON v.user_id = u.user_id
    WHERE v.raw IS NULL AND ${windowWhere('v.valid_from', 'v.valid_to')}
  UNION ALL
  SELECT ${VERSION_COLUMNS}, NULL, ${VERSION_TAIL} FROM user_versions AS v
    WHERE v.raw IS NULL AND NOT EXISTS (SELECT 1 FROM users AS u WHERE u.user_id = v.user_id) AND ${windowWhere('v.valid_from', 'v.valid_to')}
  UNION ALL
  SELECT NULL, u.user_id, u.team_id, u.client_user_id, u.raw, h.baseline_at, NULL, h.baseline_run, NULL, NULL, NULL, 0
    FROM history_state AS h CROSS JOIN users AS u NOT INDEXED WHERE ${BASELINE_USER} AND ${windowWhere('h.baseline_at', 'NULL')}`;
const CONNECTIONS_SQL = `SELECT s.id, s.user_id, s.slug, s.created_on, s.connected_at, s.disconnected_at, s.opened_run, s.closed_run, s.ended_by,
    s.backfilled FROM source_connections AS s WHERE ${windowWhere('s.connected_at', 's.disconnected_at')}`;
const BASELINE_CONNECTIONS_SQL = `SELECT NULL AS id, c.user_id, c.slug, c.created_on, h.baseline_at AS connected_at, NULL AS disconnected_at,
    h.baseline_run AS opened_run, NULL AS closed_run, NULL AS ended_by, 0 AS backfilled
    FROM history_state AS h CROSS JOIN users AS u NOT INDEXED CROSS JOIN connected_sources AS c
    WHERE c.user_id = u.user_id AND ${BASELINE_USER} AND ${windowWhere('h.baseline_at', 'NULL')}`;

/**
 * Every user's connected sources, in the order of `user_id`: the users' index walked in order, and the sources
 * (keyed by `user_id, slug`) found by seeks in that order, so each page of them is read once. The same lookups
 * made in the order of the users' rows (USER_SOURCES's correlated subquery, or a join driven by the users
 * table) land on a random page each: at 1,000,000 users 6.1 s against 0.9 s.
 */
const IN_USER_ID_ORDER = `FROM users AS u INDEXED BY users_user_id
    JOIN connected_sources AS c ON c.user_id = u.user_id ORDER BY u.user_id, c.slug`;
/** The rows of the users whose connected sources are history's baseline connections (BASELINE_USER), when the window takes them. */
const BASELINE_ROWS_SQL = `SELECT u.rowid FROM history_state AS h CROSS JOIN users AS u NOT INDEXED
    WHERE ${BASELINE_USER} AND ${windowWhere('h.baseline_at', 'NULL')}`;
/** Distinct lists of slugs at most that SourcesByRow keeps; more, and the export looks each user's up (USER_SOURCES). */
const MAX_SLUG_LISTS = 65_536;

/**
 * Each user's connected sources by the rowid of its row (an array as long as the largest rowid), as an index
 * into the distinct lists of slugs (few: users share their sources). Null when the rowids are too sparse or the
 * lists too many to hold that way.
 */
interface SourcesByRow {
  lists: (string | null)[];
  byRow: Uint32Array;
}

export interface ExportSnapshotOptions {
  /**
   * Largest rowid, as a multiple of the users, up to which the users' sources are gathered in one ordered pass
   * into an array indexed by rowid (IN_USER_ID_ORDER); beyond it (a table whose rows were mostly purged), each
   * user's are looked up. Tests set 0 to take the lookups.
   */
  denseRows?: number;
}

export class ExportSnapshot {
  private readonly s;
  private open = true;
  readonly facts: SnapshotFacts;
  private readonly denseRows: number;
  private limit: number | null | undefined;

  /** Begins the read transaction; `close` ends it. The connection must not be in a transaction already. */
  constructor(
    private readonly db: Db,
    options: ExportSnapshotOptions = {},
  ) {
    this.denseRows = options.denseRows ?? 4;
    db.prepare('BEGIN').run();
    try {
      this.facts = readFacts(db);
    } catch (err) {
      db.prepare('ROLLBACK').run();
      throw err;
    }
    this.s = {
      users: db.prepare<[], UserRowOut>(`SELECT ${USER_COLUMNS}, ${USER_SOURCES}, u.raw FROM users AS u ORDER BY u.rowid`),
      usersByRow: db.prepare<[], UserRowOut & { row: number }>(
        `SELECT ${USER_COLUMNS}, u.raw, u.rowid AS row FROM users AS u ORDER BY u.rowid`,
      ),
      rows: db.prepare<[], { rows: number; last: number | null }>('SELECT count(*) AS rows, max(rowid) AS last FROM users'),
      slugsInOrder: db.prepare<[], [number, string]>(`SELECT u.rowid, c.slug ${IN_USER_ID_ORDER}`).raw(true),
      sourcesInOrder: db
        .prepare<[], [number, string, string, string | null]>(`SELECT u.rowid, c.user_id, c.slug, c.created_on ${IN_USER_ID_ORDER}`)
        .raw(true),
      baselineRows: db.prepare<{ after: string | null; at: string | null }, number>(BASELINE_ROWS_SQL).pluck(true),
      baselineAt: db.prepare<{ after: string | null; at: string | null }, { at: string; run: number | null }>(
        `SELECT h.baseline_at AS at, h.baseline_run AS run FROM history_state AS h
         WHERE h.baseline_at IS NOT NULL AND ${windowWhere('h.baseline_at', 'NULL')}`,
      ),
      usersTouched: db.prepare<[number], UserRowOut>(
        `SELECT ${USER_COLUMNS}, ${USER_SOURCES}, u.raw FROM users AS u
         WHERE u.user_id IN (SELECT user_id FROM change_events WHERE id > ? AND user_id IS NOT NULL) ORDER BY u.rowid`,
      ),
      usersAsOf: db.prepare<{ at: string }, ExportVersionRow & { sources: string | null }>(
        `SELECT v.*, (SELECT group_concat(slug, char(31)) FROM (SELECT slug FROM source_history AS c WHERE c.user_id = v.user_id
            AND c.connected_at <= @at AND (c.disconnected_at IS NULL OR c.disconnected_at > @at) ORDER BY slug)) AS sources
         FROM user_history AS v WHERE v.valid_from <= @at AND (v.valid_to IS NULL OR v.valid_to > @at)`,
      ),
      versions: db.prepare<{ after: string | null; at: string | null }, ExportVersionRow>(VERSIONS_SQL),
      connections: db.prepare<{ after: string | null; at: string | null }, ExportSourceRow>(CONNECTIONS_SQL),
      baselineConnections: db.prepare<{ after: string | null; at: string | null }, ExportSourceRow>(BASELINE_CONNECTIONS_SQL),
      changes: db.prepare<{ after: number; at: string | null }, ExportChangeRow>(
        `SELECT id AS cursor, type, run_id, user_id, at, body FROM change_events
         WHERE id > @after AND (@at IS NULL OR at <= @at) ORDER BY id`,
      ),
    };
  }

  /** Every row of `users` (deleted ones included, with `deleted_at`), or with `afterCursor` those a change after it touched. */
  users(afterCursor?: number): Iterable<UserRowOut> {
    this.check();
    if (afterCursor !== undefined) return this.s.usersTouched.iterate(afterCursor);
    const sources = this.sourcesByRow();
    if (sources === null) return this.s.users.iterate();
    return withSources(this.s.usersByRow.iterate(), sources);
  }

  /** The versions that were current at `at`, with the slugs connected then. */
  usersAsOf(at: string): IterableIterator<ExportVersionRow & { sources: string | null }> {
    this.check();
    return this.s.usersAsOf.iterate({ at });
  }

  versions(window: HistoryWindow): IterableIterator<ExportVersionRow> {
    this.check();
    return this.s.versions.iterate(windowParams(window));
  }

  /** Source connections: those history recorded, then the baseline's (the sources of users unchanged since it). */
  sources(window: HistoryWindow): Iterable<ExportSourceRow> {
    this.check();
    const params = windowParams(window);
    const baseline = this.s.baselineAt.get(params);
    const connections = this.s.connections.iterate(params);
    if (baseline === undefined) return connections;
    const rest = this.rowLimit() === null ? this.s.baselineConnections.iterate(params) : this.baselineConnections(baseline, params);
    return concat(connections, rest);
  }

  /** The baseline users' connections: the baseline rows marked by rowid, then the sources in user_id order (IN_USER_ID_ORDER). */
  private *baselineConnections(baseline: { at: string; run: number | null }, params: { after: string | null; at: string | null }) {
    const marked = new Uint8Array((this.rowLimit() ?? 0) + 1);
    for (const row of this.s.baselineRows.iterate(params)) marked[row] = 1;
    for (const [row, userId, slug, createdOn] of this.s.sourcesInOrder.iterate()) {
      if (marked[row] !== 1) continue;
      yield {
        id: null,
        user_id: userId,
        slug,
        created_on: createdOn,
        connected_at: baseline.at,
        disconnected_at: null,
        opened_run: baseline.run,
        closed_run: null,
        ended_by: null,
        backfilled: 0,
      } satisfies ExportSourceRow;
    }
  }

  /** The largest rowid of `users` when it is small enough to index an array by (ExportSnapshotOptions.denseRows); null when not. */
  private rowLimit(): number | null {
    if (this.limit === undefined) {
      const { rows, last } = this.s.rows.get() ?? { rows: 0, last: null };
      const limit = last ?? 0;
      this.limit = limit <= this.denseRows * rows + (this.denseRows > 0 ? 1_000_000 : 0) ? limit : null;
    }
    return this.limit;
  }

  /** Every user's slugs by its rowid, from one pass in user_id order; null when they cannot be held that way (then each user's are looked up). */
  private sourcesByRow(): SourcesByRow | null {
    const limit = this.rowLimit();
    if (limit === null) return null;
    const byRow = new Uint32Array(limit + 1);
    const lists: (string | null)[] = [null];
    const ids = new Map<string, number>();
    let row = -1;
    let slugs: string[] = [];
    const close = (): boolean => {
      if (row < 0) return true;
      const key = slugs.join(SLUG_SEPARATOR);
      let id = ids.get(key);
      if (id === undefined) {
        if (lists.length > MAX_SLUG_LISTS) return false;
        id = lists.push(key) - 1;
        ids.set(key, id);
      }
      byRow[row] = id;
      return true;
    };
    for (const [r, slug] of this.s.slugsInOrder.iterate()) {
      if (r !== row) {
        if (!close()) return null;
        row = r;
        slugs = [];
      }
      slugs.push(slug);
    }
    return close() ? { lists, byRow } : null;
  }

  /** Events after the cursor `after`, up to `at` when given. */
  changes(after: number, at?: string): IterableIterator<ExportChangeRow> {
    this.check();
    return this.s.changes.iterate({ after, at: at ?? null });
  }

  /** Ends the read transaction. */
  close(): void {
    if (!this.open) return;
    this.open = false;
    if (this.db.inTransaction) this.db.prepare('COMMIT').run();
  }

  private check(): void {
    if (!this.open) throw new Error('export snapshot already closed');
  }
}

function* withSources(rows: Iterable<UserRowOut & { row: number }>, sources: SourcesByRow): Generator<UserRowOut> {
  for (const user of rows) {
    user.sources = sources.lists[sources.byRow[user.row] ?? 0] ?? null;
    yield user;
  }
}

function* concat<T>(...parts: Iterable<T>[]): Generator<T> {
  for (const part of parts) yield* part;
}

/** The rows of a history view a window keeps: all, begun or ended after @after, or begun by @at. */
function windowWhere(from: string, to: string): string {
  return `(@after IS NULL OR ${from} > @after OR ${to} > @after) AND (@at IS NULL OR ${from} <= @at)`;
}

function windowParams(window: HistoryWindow): { after: string | null; at: string | null } {
  if (window.kind === 'since') return { after: window.after, at: null };
  if (window.kind === 'as-of') return { after: null, at: window.at };
  return { after: null, at: null };
}

function readFacts(db: Db): SnapshotFacts {
  // The first read pins the snapshot: every later read of this transaction sees the same file.
  const schemaVersion = Number(db.pragma('user_version', { simple: true }));
  if (!hasTable(db, 'history_state') || !hasTable(db, 'change_events')) {
    throw new Error(
      `${db.name} is at schema version ${schemaVersion}: an export needs history and the change feed (a sync of this version adds them)`,
    );
  }
  const row = db
    .prepare<[], { epoch: string | null; cursor: number; at: string | null; run_id: number | null; since: string | null }>(
      `SELECT (SELECT epoch FROM change_feed WHERE id = 1) AS epoch,
              coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'change_events'), 0) AS cursor,
              max(coalesce((SELECT max(published_at) FROM sync_runs), ''),
                  coalesce((SELECT max(at) FROM change_events), ''),
                  coalesce((SELECT max(valid_to) FROM user_versions), ''),
                  coalesce((SELECT valid_from FROM user_versions ORDER BY id DESC LIMIT 1), ''),
                  coalesce((SELECT baseline_at FROM history_state WHERE id = 1), '')) AS at,
              (SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL) AS run_id,
              (SELECT complete_since FROM history_state WHERE id = 1) AS since`,
    )
    .get();
  return {
    schemaVersion,
    epoch: row?.epoch ?? null,
    cursor: row?.cursor ?? 0,
    at: row?.at === undefined || row.at === '' ? null : row.at,
    runId: row?.run_id ?? null,
    historySince: row?.since ?? null,
    gaps: readHistoryGaps(db),
  };
}
