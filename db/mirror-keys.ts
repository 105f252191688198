/**
 * The keys a sync run reads from the mirror (db/mirror-store.ts): every
 * active user's content hash and every user_id, streamed in user_id order.
 */
import type { Db } from './open.js';

/**
 * Rows per statement. Small on purpose: a batch's strings then die young in
 * V8's nursery. With 20,000 they outlived it, were promoted, and loading the
 * ledger of a million users took the heap from 31 to 83 MB (RSS 199 MB after
 * the load, 137-147 MB with 1,000), for no measurable gain in speed.
 */
const KEY_BATCH = 1_000;

/**
 * The keys a sync run reads from the mirror: every active user's content
 * hash (the run's ledger is built from them) and every user_id (the
 * deletion candidates are found among them). Keyset pages over the covering
 * index: bounded memory, no table row read, a batch in memory at a time.
 */
export class MirrorKeys {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      // One string per row, split in JS, costs about half of two columns.
      activeHashes: db
        .prepare<[string], string>(
          `SELECT user_id || char(9) || content_hash FROM users INDEXED BY users_content
           WHERE user_id > ? AND deleted_at IS NULL ORDER BY user_id LIMIT ${KEY_BATCH}`,
        )
        .pluck(),
      allHashes: db
        .prepare<[string], string>(
          `SELECT user_id || char(9) || content_hash FROM users INDEXED BY users_content WHERE user_id > ? ORDER BY user_id LIMIT ${KEY_BATCH}`,
        )
        .pluck(),
      contentHashOf: db.prepare<[string], string>(`SELECT content_hash FROM users WHERE user_id = ?`).pluck(),
      clientIdsOf: db.prepare<[string], { user_id: string; client_user_id: string }>(
        `SELECT u.user_id, u.client_user_id FROM json_each(?) AS j JOIN users AS u ON u.user_id = j.value`,
      ),
    };
  }

  /** [user_id, content_hash] of every active user, in user_id order. */
  activeUsers(): Generator<[string, string]> {
    return pairs(this.s.activeHashes);
  }

  /** [user_id, content_hash] of every user, deleted users included, in user_id order. */
  allUsers(): Generator<[string, string]> {
    return pairs(this.s.allHashes);
  }

  contentHashOf(userId: string): string | undefined {
    return this.s.contentHashOf.get(userId);
  }

  clientIdsOf(userIds: readonly string[]): Array<{ user_id: string; client_user_id: string }> {
    return userIds.length === 0 ? [] : this.s.clientIdsOf.all(JSON.stringify(userIds));
  }
}

/** [user_id, content_hash] rows of a keyset-paged "user_id TAB content_hash" query, streamed. */
function* pairs(query: { all(after: string): string[] }): Generator<[string, string]> {
  for (let after = ''; ;) {
    const rows = query.all(after);
    for (const row of rows) {
      const tab = row.indexOf('\t');
      after = row.slice(0, tab);
      yield [after, row.slice(tab + 1)];
    }
    if (rows.length < KEY_BATCH) return;
  }
}
