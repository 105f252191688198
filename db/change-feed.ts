/**
 * The change feed: each change the mirror publishes, as an event that
 * consumers pull (`user-mirror changes`, the replica's /mirror/v1/changes)
 * or receive (the daemon's webhooks). `user_changes` says what changed; an
 * event says it in a consumer's terms, with the record as mirrored.
 *
 * - One event per `user_changes` row, written in the transaction that
 *   publishes the row (a run's publish, an online resolve), so an event is
 *   visible exactly when its change is, and a rolled-back run emits nothing.
 * - The cursor is the event's rowid: one writer at a time holds the write
 *   lock, so cursors grow in commit order. Ids are `evt_<epoch>_<cursor>`:
 *   the epoch is drawn when the feed is created, so a rebuilt mirror never
 *   reuses an id a consumer has already seen.
 * - The body is stored as delivered, byte for byte: a webhook retried a
 *   week later carries the same bytes, and a page is read, never rebuilt.
 * - A first sync into an empty mirror is a baseline: one `mirror.baseline`
 *   event (the default) or a `user.created` per user (CHANGES_BASELINE).
 * - Retention drops events older than CHANGES_RETENTION_DAYS, never past a
 *   hold (the webhook dispatcher's cursor); `pruned_through` remembers how
 *   far, so a cursor behind it is told it missed events (410).
 *
 * The event's shape and how a change becomes one: change-event.ts.
 */
import type { Db } from './open.js';
import { hasTable } from './has-table.js';
import { describeChange, envelope, type Before, type ChangeEventType, type ChangeInput } from './change-event.js';
import { readRestores, restoreCovering, type RestoreMark } from './lineage.js';

/** A stored event: its cursor, id, user and the body as delivered. */
export interface FeedEvent {
  cursor: number;
  id: string;
  type: ChangeEventType;
  userId: string | null;
  /** When its change was published (the event's `timestamp`). */
  publishedAt: string;
  body: string;
}

export type FeedPage =
  | { gone: false; events: FeedEvent[]; next: number }
  /**
   * The cursor is behind retention: events after it were dropped. `oldest` is the oldest cursor still good to ask after.
   * With `restore`, the cursor came from a mirror file that a restore replaced (db/lineage.ts): the events after the
   * backup's last cursor up to it are not in this feed; `oldest` is that backup cursor, where to resume.
   */
  | { gone: true; oldest: number; restore?: RestoreMark };

/**
 * The state of each user before the open run first wrote it (absent rows
 * included), kept per connection in a TEMP table so that an event compares
 * the run's end with the run's start, whatever the run did in between.
 */
const RUN_BEFORE_SQL = /* sql */ `
CREATE TEMP TABLE IF NOT EXISTS run_before (
  user_id TEXT PRIMARY KEY, existed INTEGER NOT NULL, raw TEXT, deleted_at TEXT
) WITHOUT ROWID;
`;

export function prepareRunBefore(db: Db): { capture: (userId: string) => void; clear: () => void } {
  db.exec(RUN_BEFORE_SQL);
  const capture = db.prepare<[string]>(
    `INSERT OR IGNORE INTO temp.run_before (user_id, existed, raw, deleted_at)
     SELECT j.id, u.user_id IS NOT NULL, u.raw, u.deleted_at FROM (SELECT ? AS id) AS j LEFT JOIN users AS u ON u.user_id = j.id`,
  );
  const clear = db.prepare(`DELETE FROM temp.run_before`);
  return { capture: (userId) => void capture.run(userId), clear: () => void clear.run() };
}

/** Change rows read per statement at publish: the statement cannot stay open while events are inserted. */
const CHANGE_BATCH = 1_000;

interface ChangeRow {
  user_id: string;
  change: 'created' | 'updated' | 'deleted';
  cause: string | null;
  team_id: string;
  client_user_id: string;
  raw: string;
  existed: number | null;
  before_raw: string | null;
  before_deleted_at: string | null;
}

export class ChangeFeed {
  private readonly s;
  /** The file's restores: a restore replaces the file, so they are read once per feed (per open connection). */
  private readonly restores: readonly RestoreMark[];

  constructor(private readonly db: Db) {
    db.exec(RUN_BEFORE_SQL);
    this.restores = readRestores(db);
    this.s = {
      epoch: db.prepare<[], string>(`SELECT epoch FROM change_feed WHERE id = 1`).pluck(),
      prunedThrough: db.prepare<[], number>(`SELECT pruned_through FROM change_feed WHERE id = 1`).pluck(),
      lastCursor: db.prepare<[], number>(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'change_events'), 0)`).pluck(),
      insert: db.prepare<[number, string, number | null, string | null, string, string]>(
        `INSERT INTO change_events (id, type, run_id, user_id, at, body) VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      firstChange: db.prepare<[number], number | null>(`SELECT min(id) FROM user_changes WHERE run_id = ?`).pluck(),
      // A run's change rows are one id range (one writer at a time): read it by rowid, a batch at a time.
      runChanges: db.prepare<[number, number], ChangeRow & { id: number }>(
        `SELECT c.id, c.user_id, c.change, c.cause, u.team_id, u.client_user_id, u.raw,
                b.existed, b.raw AS before_raw, b.deleted_at AS before_deleted_at
         FROM user_changes AS c JOIN users AS u ON u.user_id = c.user_id
         LEFT JOIN temp.run_before AS b ON b.user_id = c.user_id
         WHERE c.id >= ? AND c.run_id = ? ORDER BY c.id LIMIT ${CHANGE_BATCH}`,
      ),
      page: db.prepare<[number, number], { cursor: number; type: ChangeEventType; user_id: string | null; at: string; body: string }>(
        `SELECT id AS cursor, type, user_id, at, body FROM change_events WHERE id > ? ORDER BY id LIMIT ?`,
      ),
      bounds: db.prepare<[], { oldest: number | null; latest: number | null; oldest_at: string | null }>(
        `SELECT min(id) AS oldest, max(id) AS latest, (SELECT at FROM change_events ORDER BY id LIMIT 1) AS oldest_at FROM change_events`,
      ),
      prune: db.prepare<[string, number]>(
        `DELETE FROM change_events WHERE id IN (SELECT id FROM change_events WHERE at < ? AND id <= ? ORDER BY id)`,
      ),
      prunedMax: db.prepare<[string, number], number | null>(`SELECT max(id) FROM change_events WHERE at < ? AND id <= ?`).pluck(),
      lastBefore: db.prepare<[string], number | null>(`SELECT max(id) FROM change_events WHERE at < ?`).pluck(),
      setPruned: db.prepare<[number]>(`UPDATE change_feed SET pruned_through = max(pruned_through, ?) WHERE id = 1`),
    };
  }

  /**
   * A run's events, from its `user_changes` rows and the state each user had
   * before the run (prepareRunBefore), in the order the changes were
   * recorded. Call inside the run's transaction, at publish. Returns how
   * many were written.
   */
  appendRun(runId: number, at: string): number {
    const epoch = this.s.epoch.get() ?? '0';
    let cursor = this.s.lastCursor.get() ?? 0;
    let n = 0;
    for (let from = this.s.firstChange.get(runId); from !== null && from !== undefined;) {
      const rows = this.s.runChanges.all(from, runId);
      for (const row of rows) {
        const before: Before | undefined = row.existed === 1 ? { raw: row.before_raw, deletedAt: row.before_deleted_at } : undefined;
        const { type, data } = describeChange({
          change: row.change,
          cause: row.cause,
          userId: row.user_id,
          teamId: row.team_id,
          clientUserId: row.client_user_id,
          raw: row.raw,
          before,
        });
        cursor++;
        this.s.insert.run(cursor, type, runId, row.user_id, at, envelope(epoch, cursor, type, at, runId, data));
        n++;
      }
      from = rows.length < CHANGE_BATCH ? undefined : (rows.at(-1)?.id ?? 0) + 1;
    }
    return n;
  }

  /** One change outside any run (an online resolve), in the caller's transaction. */
  appendChange(change: ChangeInput, at: string): void {
    const epoch = this.s.epoch.get() ?? '0';
    const cursor = (this.s.lastCursor.get() ?? 0) + 1;
    const { type, data } = describeChange(change);
    this.s.insert.run(cursor, type, null, change.userId, at, envelope(epoch, cursor, type, at, null, data));
  }

  /** The marker a first sync into an empty mirror emits instead of a `user.created` per user. */
  appendBaseline(runId: number, at: string, users: number): void {
    const epoch = this.s.epoch.get() ?? '0';
    const cursor = (this.s.lastCursor.get() ?? 0) + 1;
    const note = 'first sync into an empty mirror: every active user is new; read them from the mirror or the replica';
    const data = JSON.stringify({ users, note });
    this.s.insert.run(cursor, 'mirror.baseline', runId, null, at, envelope(epoch, cursor, 'mirror.baseline', at, runId, data));
  }

  /**
   * The event a restore appends first (db/restore.ts), at `cursorBase + 1`:
   * consumers that were behind the backup read it in order, and the webhook
   * receiver gets it, so the restore is never silent.
   */
  appendRestored(mark: RestoreMark): void {
    const epoch = this.s.epoch.get() ?? '0';
    const cursor = (this.s.lastCursor.get() ?? 0) + 1;
    const note =
      'the mirror was restored from a backup: events after backup_cursor up to this one were published by the replaced file and are not in this feed; re-read affected users from the mirror';
    const data = JSON.stringify({ backup_at: mark.backupAt, backup_cursor: mark.backupCursor, replaced_cursor: mark.replacedCursor, note });
    this.s.insert.run(cursor, 'mirror.restored', null, null, mark.at, envelope(epoch, cursor, 'mirror.restored', mark.at, null, data));
  }

  /** Events after `after`, at most `limit`: O(limit) whatever the feed's length (a rowid range). */
  page(after: number, limit: number): FeedPage {
    const pruned = this.s.prunedThrough.get() ?? 0;
    if (after < pruned) return { gone: true, oldest: pruned };
    const restore = restoreCovering(this.restores, after);
    if (restore !== undefined) return { gone: true, oldest: Math.max(restore.backupCursor, pruned), restore };
    const rows = this.s.page.all(after, limit);
    const events = rows.map((r) => ({
      cursor: r.cursor,
      id: idOf(r.body),
      type: r.type,
      userId: r.user_id,
      publishedAt: r.at,
      body: r.body,
    }));
    return { gone: false, events, next: events.at(-1)?.cursor ?? after };
  }

  /**
   * The body of the event `eventId` at `cursor`, as delivered; undefined
   * when retention dropped it or the cursor holds another event (a rebuilt
   * mirror reuses cursors under a new epoch, so the id is checked, not
   * assumed). Webhook jobs carry only the cursor and id: the end user's
   * record stays in the mirror, not in Redis.
   */
  body(cursor: number, eventId: string): string | undefined {
    const row = this.s.page.get(cursor - 1, 1);
    return row !== undefined && row.cursor === cursor && idOf(row.body) === eventId ? row.body : undefined;
  }

  /**
   * When the first event after `after` was published: how far behind a
   * subscriber settled at `after` is. Undefined when none follows, or when
   * retention dropped what follows `after`.
   */
  publishedAfter(after: number): string | undefined {
    const next = this.page(after, 1);
    return next.gone ? undefined : next.events[0]?.publishedAt;
  }

  /** The latest cursor issued (0 when none yet), from the sequence alone: O(1), for a caller that asks often (the sinks' lag). */
  latest(): number {
    return this.s.lastCursor.get() ?? 0;
  }

  /**
   * The cursor of the last event held that was published before `at` (an
   * ISO time), or null when none held is: where a replay `--since` starts
   * after. A scan of the feed, for a command, not for a loop.
   */
  lastCursorBefore(at: string): number | null {
    return this.s.lastBefore.get(at) ?? null;
  }

  /** The feed's extent: the latest cursor (0 when none yet), the oldest held, and how far retention dropped. */
  bounds(): { latest: number; oldest: number | null; oldestAt: string | null; prunedThrough: number } {
    const b = this.s.bounds.get();
    return {
      latest: Math.max(b?.latest ?? 0, this.s.lastCursor.get() ?? 0),
      oldest: b?.oldest ?? null,
      oldestAt: b?.oldest_at ?? null,
      prunedThrough: this.s.prunedThrough.get() ?? 0,
    };
  }

  /**
   * Drops events published before `cutoff` with a cursor at or below
   * `hold` (what every subscriber that must not miss one has taken), in its
   * own write transaction, waiting at most `waitMs` for the write lock
   * (SQLITE_BUSY past it). Returns how many were dropped.
   */
  prune(cutoff: string, hold: number, waitMs = 200): number {
    const previous = this.db.pragma('busy_timeout', { simple: true });
    this.db.pragma(`busy_timeout = ${waitMs}`);
    try {
      const bound = Number.isFinite(hold) ? hold : Number.MAX_SAFE_INTEGER;
      return this.db
        .transaction(() => {
          const through = this.s.prunedMax.get(cutoff, bound);
          if (through === null || through === undefined) return 0;
          const dropped = this.s.prune.run(cutoff, bound).changes;
          this.s.setPruned.run(through);
          return dropped;
        })
        .immediate();
    } finally {
      this.db.pragma(`busy_timeout = ${Number(previous)}`);
    }
  }
}

/**
 * The feed of a mirror, or undefined for one written before it (migration 7
 * runs on the next writable open): a read-only reader cannot create it.
 */
export function openChangeFeed(db: Db): ChangeFeed | undefined {
  return hasTable(db, 'change_events') ? new ChangeFeed(db) : undefined;
}

/** The id from a stored body, which starts `{"id":"evt_…"`. */
function idOf(body: string): string {
  return body.slice(7, body.indexOf('"', 7));
}
