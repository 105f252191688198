/**
 * Writing one user into a mirror that already has users: its `users` row,
 * its `connected_sources` and `field_warnings`, its `user_changes` row, and
 * the (team_id, client_user_id) key it may take from another active user.
 * Used by a sync run for each new or changed listing (inside the run's
 * transaction) and by the online resolve (db/user-refresh.ts). Before any
 * write changes a user, its baseline history becomes rows (db/history.ts).
 *
 * Decisions (documented for analytics in db/SCHEMA.md):
 * - At most one active user per (team_id, client_user_id). When a record
 *   claims a key an active user holds, the newer record wins and the holder
 *   is soft-deleted ('deleted', counted as superseded), whatever the run's
 *   status: the index cannot hold both, and the claim is upstream's word.
 * - One change row per user and run, from the state before the run to the
 *   state after it: no/yes 'created', yes/yes 'updated', yes/no 'deleted',
 *   no/no none. A soft-deleted user seen again is restored as 'created'.
 * - `field_warnings` holds the warnings of each user's stored record: they
 *   are replaced whenever the user's row is written, and only then.
 */
import { prepareRunBefore } from './change-feed.js';
import { History } from './history.js';
import { IdentityConflicts } from './identity-conflicts.js';
import type { Db } from './open.js';
import type { MirroredUser, StagedRecord } from './mirrored-user.js';
import { SOURCE_COLUMNS, toSourceRows, toUserRow, USER_COLUMNS, type LiveState } from './user-row.js';

/** One listing a sync run writes. */
export interface UserWrite {
  record: StagedRecord;
  /** Its content hash (db/user-row.ts), stored in users.content_hash. */
  digest: string;
  /** The user was listed before in this run: this later listing replaces the earlier one. */
  repeat: boolean;
  /** A repeat whose content is what the mirror held at the run's start: the run changes nothing of this user. */
  sameAsStart: boolean;
}

export type Cell = string | number | null;

/** `a, b, c`, each with `prefix`: column lists for SQL built from USER_COLUMNS and SOURCE_COLUMNS. */
export const cols = (names: readonly string[], prefix = '') => names.map((c) => prefix + c).join(', ');
export const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');
const updateFromExcluded = USER_COLUMNS.filter((c) => c !== 'user_id')
  .map((c) => `${c} = excluded.${c}`)
  .join(', ');

/** The users row's INSERT: the record's columns, then first_seen_at and last_seen_at. Positional: named binds cost more per row. */
export const INSERT_USER_SQL = `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
  VALUES (${marks(USER_COLUMNS.length + 2)}, NULL)`;

/** The values INSERT_USER_SQL binds. */
export function userValues(record: StagedRecord, digest: string, now: string): Cell[] {
  const row = toUserRow(record.user, record.rawJson, digest);
  const values: Cell[] = [];
  for (const c of USER_COLUMNS) values.push(row[c]);
  values.push(now, now);
  return values;
}

/** What a user's row held just before a listing was written over it. */
export interface PriorRow {
  hash: string;
  clientUserId: string;
}

/** Why a user became inactive, in `user_changes.cause`. */
export type ChangeCause = 'verified' | 'superseded';

export class UserWrites {
  private readonly s;
  private readonly before;
  /** The open run's identity conflicts (db/identity-conflicts.ts); cleared as a run opens. */
  readonly conflicts = new IdentityConflicts();
  /** History (db/history.ts): a write first makes a baseline user's implicit history rows. */
  readonly history: History;

  constructor(db: Db) {
    this.before = prepareRunBefore(db);
    this.history = new History(db);
    this.s = {
      liveUser: db.prepare<[string], LiveState & { raw: string }>(`SELECT content_hash, deleted_at, raw FROM users WHERE user_id = ?`),
      // [deleted, content_hash, client_user_id]: raw, so no object per call.
      priorRow: db
        .prepare<[string], [number, string, string]>(
          `SELECT deleted_at IS NOT NULL, content_hash, client_user_id FROM users WHERE user_id = ?`,
        )
        .raw(),
      parkUser: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ? AND deleted_at IS NULL`),
      holdersOfKey: db
        .prepare<[string, string, string], string>(
          `SELECT user_id FROM users WHERE team_id = ? AND client_user_id = ? AND deleted_at IS NULL AND user_id <> ?`,
        )
        .pluck(),
      softDelete: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ?`),
      upsertUser: db.prepare<[Cell[]]>(
        `${INSERT_USER_SQL}
         ON CONFLICT (user_id) DO UPDATE SET ${updateFromExcluded}, last_seen_at = excluded.last_seen_at, deleted_at = NULL`,
      ),
      dropSources: db.prepare<[string]>(`DELETE FROM connected_sources WHERE user_id = ?`),
      insertSource: db.prepare<[Cell[]]>(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)}) VALUES (${marks(SOURCE_COLUMNS.length)})`,
      ),
      dropWarnings: db.prepare<[string]>(`DELETE FROM field_warnings WHERE user_id = ?`),
      insertWarning: db.prepare<[string, string, string, number | null, string]>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at) VALUES (?, ?, ?, ?, ?)`,
      ),
      insertChange: db.prepare<[number | null, string, string, string | null, string]>(
        `INSERT INTO user_changes (run_id, user_id, change, cause, at) VALUES (?, ?, ?, ?, ?)`,
      ),
      // Through user_changes_user: a user's change rows, few, then the run's among them.
      runChange: db.prepare<[string, number], { id: number; change: string }>(
        `SELECT id, change FROM user_changes WHERE user_id = ? AND run_id = ?`,
      ),
      setChange: db.prepare<[string, string | null, string, number]>(`UPDATE user_changes SET change = ?, cause = ?, at = ? WHERE id = ?`),
      dropChange: db.prepare<[number]>(`DELETE FROM user_changes WHERE id = ?`),
    };
  }

  /** What the mirror holds for the user, as far as "must we write it?" needs. */
  live(userId: string): (LiveState & { raw: string }) | undefined {
    return this.s.liveUser.get(userId);
  }

  /**
   * One listing of a sync run, with the change kept to one row per user and
   * run. Returns what the user's row held before (undefined: no row).
   */
  applyListed(runId: number, write: UserWrite, now: string): PriorRow | undefined {
    const { record } = write;
    const userId = record.user.user_id;
    const [deleted, priorHash, priorClient] = this.s.priorRow.get(userId) ?? [undefined, undefined, undefined];
    // Only a repeat, or a user deleted now (maybe superseded earlier in this run), can have a change row of this run.
    const prior = write.repeat || deleted === 1 ? this.s.runChange.get(userId, runId) : undefined;
    const activeBefore = prior !== undefined ? prior.change !== 'created' : deleted === 0;
    if (deleted === 0) this.history.materialize(userId);
    this.before.capture(userId);
    for (const holder of this.takeKey(record.user, now)) this.retire(runId, holder, record.user, now);
    this.s.upsertUser.run(userValues(record, write.digest, now));
    this.replaceDetails(record, runId, now);
    const change = write.sameAsStart ? undefined : activeBefore ? 'updated' : 'created';
    this.recordChange(runId, userId, prior, change, null, now);
    return priorHash === undefined ? undefined : { hash: priorHash, clientUserId: priorClient ?? '' };
  }

  /** Forgets the previous run's before-states and conflicts: call as a run's transaction opens. */
  beginRun(): void {
    this.before.clear();
    this.conflicts.clear();
  }

  /**
   * One record outside any run (online resolve): change rows carry run_id
   * NULL. `created`: the user was absent or deleted before. Returns the
   * users whose key it took; the caller has decided it must be written.
   */
  applyRefreshed(record: StagedRecord, digest: string, now: string, created: boolean): string[] {
    // The record it replaces, for the version it closes (db/history.ts).
    this.before.clear();
    this.before.capture(record.user.user_id);
    this.history.materialize(record.user.user_id);
    const superseded = this.takeKey(record.user, now);
    for (const id of superseded) {
      this.history.materialize(id);
      this.s.softDelete.run(now, id);
      this.s.insertChange.run(null, id, 'deleted', 'superseded', now);
    }
    this.s.upsertUser.run(userValues(record, digest, now));
    this.replaceDetails(record, null, now);
    this.s.insertChange.run(null, record.user.user_id, created ? 'created' : 'updated', null, now);
    return superseded;
  }

  /** A user's field warnings, for a writer that inserts the users row itself. */
  insertWarnings(record: StagedRecord, runId: number | null, now: string): void {
    for (const w of record.warnings) this.s.insertWarning.run(record.user.user_id, w.field, w.problem, runId, now);
  }

  dropWarnings(userId: string): void {
    this.s.dropWarnings.run(userId);
  }

  softDelete(userId: string, now: string): void {
    this.s.softDelete.run(now, userId);
  }

  /**
   * Soft-deletes the holder of a key another user takes, as 'deleted' unless
   * this run created it. A holder this run wrote was listed in this scan with
   * the key: an identity conflict. (One listed unchanged left no trace to
   * tell it from a holder the service deleted; both lose the key alike.)
   */
  private retire(runId: number, userId: string, taker: MirroredUser, now: string): void {
    this.history.materialize(userId);
    this.s.softDelete.run(now, userId);
    const prior = this.s.runChange.get(userId, runId);
    if (prior !== undefined && prior.change !== 'deleted') {
      this.conflicts.add({
        kind: 'client_user_id',
        teamId: taker.team_id,
        clientUserId: taker.client_user_id,
        earlier: userId,
        later: taker.user_id,
      });
    }
    this.recordChange(runId, userId, prior, prior?.change === 'created' ? undefined : 'deleted', 'superseded', now);
  }

  private recordChange(
    runId: number,
    userId: string,
    prior: { id: number } | undefined,
    change: string | undefined,
    cause: ChangeCause | null,
    now: string,
  ): void {
    if (prior === undefined) {
      if (change !== undefined) this.s.insertChange.run(runId, userId, change, cause, now);
    } else if (change === undefined) this.s.dropChange.run(prior.id);
    else this.s.setChange.run(change, cause, now, prior.id);
  }

  /**
   * Takes the user out of the unique key index (its own key may move onto a
   * taken one), and returns the other active holders of its new key: the
   * newer record wins, the caller retires them.
   */
  private takeKey(user: MirroredUser, now: string): string[] {
    this.s.parkUser.run(now, user.user_id);
    return this.s.holdersOfKey.all(user.team_id, user.client_user_id, user.user_id);
  }

  private replaceDetails(record: StagedRecord, runId: number | null, now: string): void {
    this.s.dropSources.run(record.user.user_id);
    this.s.dropWarnings.run(record.user.user_id);
    for (const source of toSourceRows(record.user)) this.s.insertSource.run(SOURCE_COLUMNS.map((c) => source[c]));
    this.insertWarnings(record, runId, now);
  }
}
