/**
 * The online resolve's write (`user-mirror resolve --online`): one user as
 * the service just returned it, with its change row, event and history, in
 * a transaction of its own, outside any sync run. The row-level rules are
 * UserWrites' (db/user-writes.ts).
 */
import { ChangeFeed } from './change-feed.js';
import type { Db } from './open.js';
import { isDeepStrictEqual } from 'node:util';
import { needsWrite } from './user-row.js';
import type { StagedRecord } from './mirrored-user.js';
import { UserWrites } from './user-writes.js';

/**
 * The online resolve's write: one user as the service just returned it, in
 * its own transaction, outside any sync run (change rows carry run_id NULL).
 * Takes the user's (team_id, client_user_id) over from any other active
 * holder, which is soft-deleted. Never deletes anything for a 404: that is
 * not a scan.
 *
 * A record whose content equals the stored one in another key order is
 * 'unchanged' and keeps the listing's text, so the next sync sees no change
 * either: the resolve's client returns the parsed object, not the received
 * bytes, so its hash cannot match the listing's even when nothing changed.
 */
type RefreshChange = 'created' | 'updated' | 'unchanged';

export interface RefreshResult {
  change: RefreshChange;
  /** user_ids soft-deleted because this user now holds their client_user_id. */
  superseded: string[];
}

export class UserRefresh {
  private readonly writes: UserWrites;
  private readonly feed: ChangeFeed;

  constructor(
    private readonly db: Db,
    private readonly clock: () => Date = () => new Date(),
  ) {
    this.writes = new UserWrites(db);
    this.feed = new ChangeFeed(db);
  }

  /** `digest`: the record's content hash (db/user-row.ts). */
  refresh(record: StagedRecord, digest: string): RefreshResult {
    return this.db
      .transaction((): RefreshResult => {
        const live = this.writes.live(record.user.user_id);
        if (!needsWrite(live, digest)) return { change: 'unchanged', superseded: [] };
        // The same content in other bytes (key order, spacing): the client's answer need not match the listing's text.
        if (live !== undefined && live.deleted_at === null && isDeepStrictEqual(JSON.parse(live.raw), JSON.parse(record.rawJson))) {
          return { change: 'unchanged', superseded: [] };
        }
        const created = live === undefined || live.deleted_at !== null;
        const now = this.clock().toISOString();
        const mark = this.writes.history.mark();
        const superseded = this.writes.applyRefreshed(record, digest, now, created);
        this.writes.history.publishOnline(mark, now);
        // Its events, in the order of its change rows: the holders it displaced, then the user.
        const { user_id: userId, team_id: teamId, client_user_id: clientUserId } = record.user;
        for (const id of superseded) {
          this.feed.appendChange(
            { change: 'deleted', cause: 'superseded', userId: id, teamId, clientUserId, raw: 'null', before: undefined },
            now,
          );
        }
        const before = live === undefined ? undefined : { raw: live.raw, deletedAt: live.deleted_at };
        this.feed.appendChange(
          { change: created ? 'created' : 'updated', cause: null, userId, teamId, clientUserId, raw: record.rawJson, before },
          now,
        );
        return { change: created ? 'created' : 'updated', superseded };
      })
      .immediate();
  }
}
