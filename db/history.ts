/**
 * History: every version of a user and every connection of a source, kept
 * apart from the change feed and its retention (migration 9, db/SCHEMA.md).
 *
 * Written from the change rows a publish makes visible, in the same
 * transaction, so history is exactly as consistent as the mirror: a version
 * starts (`valid_from`) and ends (`valid_to`) at the publish that showed it,
 * a rolled-back run leaves nothing, and a user the run did not change
 * writes nothing. For each user with a change row:
 * - its open version closes, keeping the record it had before the write
 *   (the run's before-state, db/change-feed.ts `prepareRunBefore`, or the
 *   row itself when only `deleted_at` moved), and why it ended;
 * - if the user is active now, a version opens; its record is the `users`
 *   row until it closes, so a first sync writes no second copy of records;
 * - its open source connections no longer listed (or listed with another
 *   upstream `created_on`: a reconnection) close, or all of them when the
 *   user went; sources now listed without an open connection open one.
 *
 * A first sync into an empty mirror writes no rows: it is the baseline
 * (`history_state.baseline_at`), and each user it loaded keeps its one
 * version and its connections implicitly, from its `users` and
 * `connected_sources` rows, until a write first touches it: `materialize`
 * (called before any write changes a user's row or sources) makes them rows
 * then, while they still hold the baseline. The views `user_history` and
 * `source_history` show rows and baseline as one.
 *
 * History is complete from `history_state.complete_since`: a mirror's first
 * complete publish (an online resolve never begins it: one user is not the
 * directory), or the upgrade that created the tables in an existing mirror;
 * retention (HISTORY_RETENTION_DAYS) moves it forward.
 */
import type { Db } from './open.js';

/** The change rows of one publish: a sync run's, or an online resolve's (run_id NULL, after a known id). */
const RUN_CHANGES = `SELECT user_id, change, cause FROM user_changes WHERE run_id = @run`;
const ONLINE_CHANGES = `SELECT user_id, change, cause FROM user_changes WHERE id > @after AND run_id IS NULL`;

function statements(db: Db, changes: string) {
  return {
    closeVersions: db.prepare<{ run: number | null; after?: number; at: string }>(
      `WITH ch AS (${changes})
       UPDATE user_versions AS v SET valid_to = @at, closed_run = @run,
         end_cause = CASE ch.change WHEN 'deleted' THEN coalesce(ch.cause, 'verified') ELSE 'updated' END,
         raw = coalesce(
           (SELECT b.raw FROM temp.run_before AS b WHERE b.user_id = v.user_id AND b.existed = 1),
           (SELECT u.raw FROM users AS u WHERE u.user_id = v.user_id))
       FROM ch WHERE v.user_id = ch.user_id AND v.valid_to IS NULL`,
    ),
    openVersions: db.prepare<{ run: number | null; after?: number; at: string }>(
      `WITH ch AS (${changes})
       INSERT INTO user_versions (user_id, team_id, client_user_id, valid_from, opened_run)
       SELECT u.user_id, u.team_id, u.client_user_id, @at, @run FROM ch JOIN users AS u ON u.user_id = ch.user_id
       WHERE ch.change <> 'deleted' AND u.deleted_at IS NULL ORDER BY u.user_id`,
    ),
    closeConnections: db.prepare<{ run: number | null; after?: number; at: string }>(
      `WITH ch AS (${changes})
       UPDATE source_connections AS s SET disconnected_at = @at, closed_run = @run,
         ended_by = CASE WHEN u.deleted_at IS NULL THEN 'disconnected' ELSE 'user_deleted' END
       FROM ch JOIN users AS u ON u.user_id = ch.user_id
       WHERE s.user_id = ch.user_id AND s.disconnected_at IS NULL
         AND (u.deleted_at IS NOT NULL OR NOT EXISTS (
           SELECT 1 FROM connected_sources AS cs WHERE cs.user_id = s.user_id AND cs.slug = s.slug AND cs.created_on IS s.created_on))`,
    ),
    openConnections: db.prepare<{ run: number | null; after?: number; at: string }>(
      `WITH ch AS (${changes})
       INSERT INTO source_connections (user_id, slug, created_on, connected_at, opened_run)
       SELECT cs.user_id, cs.slug, cs.created_on, @at, @run
       FROM ch JOIN users AS u ON u.user_id = ch.user_id JOIN connected_sources AS cs ON cs.user_id = u.user_id
       WHERE u.deleted_at IS NULL AND NOT EXISTS (
         SELECT 1 FROM source_connections AS s WHERE s.user_id = cs.user_id AND s.slug = cs.slug AND s.disconnected_at IS NULL)
       ORDER BY cs.user_id, cs.slug`,
    ),
  };
}

/**
 * A baseline user's implicit version and connections, as rows (db/history.ts
 * header): connections first, since both ask whether the user has a version
 * row yet. `who` selects the users: one (`= @user`) or a JSON list (`IN`).
 */
function materializing(db: Db, who: string) {
  const untouched = `h.baseline_at IS NOT NULL AND u.first_seen_at <= h.baseline_at AND u.deleted_at IS NULL AND u.user_id ${who}
    AND NOT EXISTS (SELECT 1 FROM user_versions AS x WHERE x.user_id = u.user_id)`;
  return {
    connections: db.prepare<{ user?: string; ids?: string }>(
      `INSERT INTO source_connections (user_id, slug, created_on, connected_at, opened_run)
       SELECT c.user_id, c.slug, c.created_on, h.baseline_at, h.baseline_run
       FROM history_state AS h, users AS u JOIN connected_sources AS c ON c.user_id = u.user_id
       WHERE ${untouched} ORDER BY c.user_id, c.slug`,
    ),
    version: db.prepare<{ user?: string; ids?: string }>(
      `INSERT INTO user_versions (user_id, team_id, client_user_id, valid_from, opened_run)
       SELECT u.user_id, u.team_id, u.client_user_id, h.baseline_at, h.baseline_run
       FROM history_state AS h, users AS u WHERE ${untouched} ORDER BY u.user_id`,
    ),
  };
}

export class History {
  private readonly run;
  private readonly online;
  private readonly one;
  private readonly many;
  private readonly s;

  constructor(db: Db) {
    this.run = statements(db, RUN_CHANGES);
    this.online = statements(db, ONLINE_CHANGES);
    this.one = materializing(db, '= @user');
    this.many = materializing(db, 'IN (SELECT value FROM json_each(@ids))');
    this.s = {
      baselineAt: db.prepare<[], string | null>(`SELECT baseline_at FROM history_state WHERE id = 1`).pluck(),
      setBaseline: db.prepare<[string, number]>(`UPDATE history_state SET baseline_at = ?, baseline_run = ? WHERE id = 1`),
      lastChange: db.prepare<[], number>(`SELECT coalesce(max(id), 0) FROM user_changes`).pluck(),
      // The first complete publish of a mirror without history: it starts there; nothing before is known.
      begin: db.prepare<[string]>(`UPDATE history_state SET complete_since = ? WHERE id = 1 AND complete_since IS NULL`),
    };
  }

  /**
   * A sync run's publish, after its change rows are all written; `at` is its
   * published_at. `complete`: the run read the whole listing and settled its
   * deletions, so the mirror holds every user; only such a run may begin
   * history (a partial first sync lacks the users of its failed pages).
   */
  publishRun(runId: number, at: string, complete: boolean): void {
    if (complete) this.s.begin.run(at);
    this.apply(this.run, { run: runId, at });
  }

  /**
   * Whether a first sync into an empty mirror may be the baseline, writing no
   * rows (publishBaseline): only once per mirror. A mirror emptied later
   * (every user purged) has rows whose users are gone, and its new users get
   * rows like any run's.
   */
  mayBeBaseline(): boolean {
    return (this.s.baselineAt.get() ?? null) === null;
  }

  /** The publish of a first sync into an empty mirror that mayBeBaseline: its users' versions start here, implicitly. */
  publishBaseline(runId: number, at: string, complete: boolean): void {
    if (complete) this.s.begin.run(at);
    this.s.setBaseline.run(at, runId);
  }

  /** Makes a baseline user's implicit version and connections rows: call before any write changes its row or sources. */
  materialize(userId: string): void {
    this.one.connections.run({ user: userId });
    this.one.version.run({ user: userId });
  }

  /** materialize for many users at once (`userIds`: a JSON array). */
  materializeAll(userIds: string): void {
    this.many.connections.run({ ids: userIds });
    this.many.version.run({ ids: userIds });
  }

  /** The id of the latest change row: an online write's changes are those after it (publishOnline). */
  mark(): number {
    return this.s.lastChange.get() ?? 0;
  }

  /** An online resolve's write, in its transaction: its change rows are those after `after` (mark()). */
  publishOnline(after: number, at: string): void {
    this.apply(this.online, { run: null, after, at });
  }

  private apply(s: ReturnType<typeof statements>, params: { run: number | null; after?: number; at: string }): void {
    s.closeVersions.run(params);
    s.openVersions.run(params);
    s.closeConnections.run(params);
    s.openConnections.run(params);
  }
}
