/**
 * Reading history (db/history.ts): a user as mirrored at a past time, and
 * every version and source connection of a client_user_id. Read-only; a
 * mirror not yet upgraded to migration 9 has no history (`HistoryMissingError`).
 *
 * Times compare as text: every stored time is `toISOString()` form
 * (db/SCHEMA.md, Timestamps), and the caller passes one too.
 */
import { gapHolding, readHistoryGaps, type HistoryGap } from './lineage.js';
import type { Db } from './open.js';
import { hasTable } from './has-table.js';

/** One version of a user, its record included (`user_history`). */
export interface UserVersion {
  /** NULL for a baseline user's implicit version (db/history.ts). */
  id: number | null;
  user_id: string;
  team_id: string;
  client_user_id: string;
  /** The record as mirrored during the version; NULL only if the users row of an open version is gone. */
  raw: string | null;
  valid_from: string;
  valid_to: string | null;
  opened_run: number | null;
  closed_run: number | null;
  end_cause: 'updated' | 'verified' | 'superseded' | null;
  ended_in_deletion: number | null;
  backfilled: number;
}

export interface SourceConnection {
  user_id: string;
  slug: string;
  /** When the service says the source was connected. */
  created_on: string | null;
  /** When the mirror first showed it (the publish that did). */
  connected_at: string;
  disconnected_at: string | null;
  ended_by: 'disconnected' | 'user_deleted' | null;
  backfilled: number;
}

/** What "who was this client_user_id at `at`?" comes to. Pure: answerAsOf. */
export type AsOfAnswer =
  | { kind: 'unknown'; completeSince: string | null }
  /** `at` falls where a restore left history blank: from the backup to the first publish after it (db/lineage.ts). */
  | { kind: 'gap'; gap: HistoryGap }
  | { kind: 'absent' }
  | { kind: 'found'; version: UserVersion; sources: SourceConnection[] };

class HistoryMissingError extends Error {
  override name = 'HistoryMissingError';
}

/**
 * The answer from history's start and the versions that cover `at`: before
 * history is complete nothing may be said (a missing version there is not
 * a "no"); one version covers it at most per team (one active holder of a
 * key), and across teams the first is taken, as the offline resolve does.
 */
function answerAsOf(
  completeSince: string | null,
  at: string,
  covering: readonly UserVersion[],
  sourcesOf: (version: UserVersion) => SourceConnection[],
  gaps: readonly HistoryGap[] = [],
): AsOfAnswer {
  if (completeSince === null || at < completeSince) return { kind: 'unknown', completeSince };
  const gap = gapHolding(gaps, at);
  if (gap !== undefined) return { kind: 'gap', gap };
  const version = covering[0];
  return version === undefined ? { kind: 'absent' } : { kind: 'found', version, sources: sourcesOf(version) };
}

/** How the mirror stores a time, the one form in which text order is time order. */
const STORED_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const VERSION_COLUMNS = `id, user_id, team_id, client_user_id, raw, valid_from, valid_to, opened_run, closed_run, end_cause, ended_in_deletion, backfilled`;
const CONNECTION_COLUMNS = `user_id, slug, created_on, connected_at, disconnected_at, ended_by, backfilled`;

export class HistoryReader {
  private readonly s;

  constructor(private readonly db: Db) {
    if (!hasTable(db, 'history_state')) {
      throw new HistoryMissingError(`${db.name} has no history yet: it is added by the next sync (or any writable open) of this version`);
    }
    this.s = {
      completeSince: db.prepare<[], string | null>(`SELECT complete_since FROM history_state WHERE id = 1`).pluck(),
      covering: db.prepare<{ client: string; at: string; team: string | null }, UserVersion>(
        `SELECT ${VERSION_COLUMNS} FROM user_history
         WHERE client_user_id = @client AND valid_from <= @at AND (valid_to IS NULL OR valid_to > @at)
           AND (@team IS NULL OR team_id = @team)
         ORDER BY valid_from DESC`,
      ),
      sourcesAt: db.prepare<{ user: string; at: string }, SourceConnection>(
        `SELECT ${CONNECTION_COLUMNS} FROM source_history
         WHERE user_id = @user AND connected_at <= @at AND (disconnected_at IS NULL OR disconnected_at > @at)
         ORDER BY slug`,
      ),
      versions: db.prepare<{ client: string; team: string | null }, UserVersion>(
        `SELECT ${VERSION_COLUMNS} FROM user_history
         WHERE user_id IN (SELECT user_id FROM user_history WHERE client_user_id = @client AND (@team IS NULL OR team_id = @team))
         ORDER BY valid_from, id IS NULL, id`,
      ),
      connections: db.prepare<[string], SourceConnection>(
        `SELECT ${CONNECTION_COLUMNS} FROM source_history WHERE user_id IN (SELECT value FROM json_each(?))
         ORDER BY connected_at, slug, id`,
      ),
    };
  }

  /** When history became complete; null before a mirror's first complete sync. */
  completeSince(): string | null {
    return this.s.completeSince.get() ?? null;
  }

  /**
   * The user that held `clientUserId` at `at` (ISO 8601, UTC, milliseconds), and its sources then.
   * Times are compared as text, which orders instants only in that one form: any other is refused.
   */
  asOf(clientUserId: string, at: string, teamId?: string): AsOfAnswer {
    if (!STORED_INSTANT.test(at)) throw new RangeError(`as-of time ${JSON.stringify(at.slice(0, 40))} is not YYYY-MM-DDTHH:MM:SS.sssZ`);
    const covering = this.s.covering.all({ client: clientUserId, at, team: teamId ?? null });
    return answerAsOf(this.completeSince(), at, covering, (v) => this.s.sourcesAt.all({ user: v.user_id, at }), this.gaps());
  }

  /** The spans restores left blank; read per question, as a restore replaces the file under no reader (it refuses while one holds it). */
  gaps(): HistoryGap[] {
    return readHistoryGaps(this.db);
  }

  /**
   * Every version of every user that ever held `clientUserId` (all of each
   * such user's versions: one may have held another id before), oldest
   * first, and their source connections.
   */
  of(clientUserId: string, teamId?: string): { versions: UserVersion[]; connections: SourceConnection[] } {
    const versions = this.s.versions.all({ client: clientUserId, team: teamId ?? null });
    const users = [...new Set(versions.map((v) => v.user_id))];
    return { versions, connections: users.length === 0 ? [] : this.s.connections.all(JSON.stringify(users)) };
  }
}
