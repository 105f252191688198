/**
 * The keys a sync run reads from the mirror: every active user's content
 * hash (the run's ledger is built from them) and every user_id (the
 * deletion candidates are found among them). Keyset pages over the covering
 * index: bounded memory, no table row read, a batch in memory at a time.
 */
import type { Db } from './open.js';

/**
 * Rows per statement. Small on purpose: a batch's strings then die young in
 * V8's nursery. With 20,000 they outlived it, were promoted, and loading the
 * ledger of a million users took the heap from 31 to 83 MB (RSS 199 MB after
 * the load, 137-147 MB with 1,000), for no measurable gain in speed.
 */
const BATCH = 1_000;

export class MirrorKeys {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      // One string per row, split in JS, costs about half of two columns.
      activeHashes: db
        .prepare<[string], string>(
          `SELECT user_id || char(9) || content_hash FROM users INDEXED BY users_content
           WHERE user_id > ? AND deleted_at IS NULL ORDER BY user_id LIMIT ${BATCH}`,
        )
        .pluck(),
      userIds: db
        .prepare<[string], string>(`SELECT user_id FROM users INDEXED BY users_content WHERE user_id > ? ORDER BY user_id LIMIT ${BATCH}`)
        .pluck(),
      clientIdsOf: db.prepare<[string], { user_id: string; client_user_id: string }>(
        `SELECT u.user_id, u.client_user_id FROM json_each(?) AS j JOIN users AS u ON u.user_id = j.value`,
      ),
    };
  }

  /** [user_id, content_hash] of every active user, in user_id order. */
  *activeUsers(): Generator<[string, string]> {
    for (let after = ''; ; ) {
      const rows = this.s.activeHashes.all(after);
      for (const row of rows) {
        const tab = row.indexOf('\t');
        after = row.slice(0, tab);
        yield [after, row.slice(tab + 1)];
      }
      if (rows.length < BATCH) return;
    }
  }

  /** Every user_id, deleted users included, in user_id order. */
  *userIds(): Generator<string> {
    for (let after = ''; ; ) {
      const ids = this.s.userIds.all(after);
      yield* ids;
      after = ids.at(-1) ?? after;
      if (ids.length < BATCH) return;
    }
  }

  clientIdsOf(userIds: readonly string[]): Array<{ user_id: string; client_user_id: string }> {
    return userIds.length === 0 ? [] : this.s.clientIdsOf.all(JSON.stringify(userIds));
  }
}
