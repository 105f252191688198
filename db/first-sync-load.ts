/**
 * A first sync, into an empty mirror: every listing is an insert, so the
 * rows go in plainly and the work that indexes do row by row is done once,
 * sorted, at the end. Inside the run's transaction: readers keep seeing the
 * (empty) mirror with its indexes, and a crash or a failed run leaves it so.
 *
 * - Every index of users and connected_sources but the latter's primary key
 *   is dropped at the start and built again at the end, by sorting, which
 *   costs a fraction of keeping them up row by row. `users_user_id` (the
 *   unique user_id key, migration 6) is one of them: random UUIDs inserted
 *   one by one into it were the largest single cost of a first sync.
 * - Source rows wait in a TEMP table, in arrival order, and go into
 *   connected_sources sorted at the end: its primary key is (user_id, slug),
 *   and rows inserted in random user_id order each land on a random page,
 *   which costs several times an append once the table outgrows the cache.
 * - Change rows ('created') are written at the end, in user_id order.
 * - A repeat listing (the directory moved under the scan) is inserted like
 *   the first, with a higher rowid: nothing tells it apart during the scan
 *   (the sync keeps no ledger of a first sync's users, src/sync/run-writer.ts).
 *   Rebuilding the unique user_id key finds it: the key fails, the earlier
 *   rows are removed in one pass, and the key is built again. Their field
 *   warnings and source rows wait in TEMP tables beside the rowid they were
 *   written for, and only the latest listing's are kept. Two users listed
 *   with one client key make the unique key index fail the same way: the
 *   later-written one keeps the key, the others are soft-deleted (new in this
 *   run: no change row).
 *
 * Still through the WAL, so its pages are written twice (the WAL, then the
 * checkpoint after the run). Writing them once needs the mirror to itself:
 * leaving WAL mode (a rollback journal, of which an empty mirror needs only
 * its few schema pages) fails while any other connection is open, and a side
 * file renamed over the mirror would share the -wal and -shm files with a
 * reader still holding the old file (the daemon holds one for its whole
 * life). Measured, 100,000 users, whole `sync --once` processes, paired:
 * a rollback journal with synchronous off gave 0.93x the CPU and 0.87-0.94x
 * the wall time, while blocking every reader and a second sync's open for
 * the whole load; not worth it (bench/history/README.md, "The first sync's double write").
 */
import type { Db } from './open.js';
import { SOURCE_COLUMNS, toSourceRows } from './user-row.js';
import { cols, INSERT_USER_SQL, marks, userValues, type Cell, type UserWrite, type UserWrites } from './user-writes.js';

interface SecondaryIndex {
  name: string;
  tbl_name: string;
  sql: string;
}

/** The unique user_id index of migration 6. */
const USER_KEY = 'users_user_id';

/** One first sync's state, from `begin` to `finish`. */
export interface BulkLoad {
  indexes: SecondaryIndex[];
}

/**
 * `owner` is the users rowid the row was written for, so a repeat listing's
 * earlier rows can be told apart without an index.
 */
const BULK_TABLES_SQL = /* sql */ `
CREATE TEMP TABLE IF NOT EXISTS bulk_sources (
  owner INTEGER NOT NULL, user_id TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL,
  logo TEXT, created_on TEXT, descriptor TEXT NOT NULL
);
CREATE TEMP TABLE IF NOT EXISTS bulk_warnings (
  owner INTEGER NOT NULL, user_id TEXT NOT NULL, field TEXT NOT NULL, problem TEXT NOT NULL
);
`;

export class FirstSyncLoad {
  private readonly s;

  constructor(
    private readonly db: Db,
    private readonly writes: UserWrites,
  ) {
    db.exec(BULK_TABLES_SQL);
    this.s = {
      isEmpty: db.prepare<[], number>(`SELECT NOT EXISTS (SELECT 1 FROM users) AND NOT EXISTS (SELECT 1 FROM connected_sources)`).pluck(),
      secondaryIndexes: db.prepare<[], SecondaryIndex>(
        `SELECT name, tbl_name, sql FROM sqlite_schema
         WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ('users', 'connected_sources')`,
      ),
      insertUser: db.prepare<[Cell[]]>(INSERT_USER_SQL),
      // Every row of the load (the mirror was empty): a full scan, asked only when a count must be exact.
      userIds: db.prepare<[], string>(`SELECT user_id FROM users`).pluck(),
      // A user listed twice under another client_user_id: each listing beside the one after it.
      relistedUnderOtherKey: db.prepare<[], { user_id: string; earlier: string; later: string }>(
        `SELECT user_id, earlier, later FROM (
           SELECT user_id, client_user_id AS earlier,
             lead(client_user_id) OVER (PARTITION BY user_id ORDER BY rowid) AS later FROM users)
         WHERE later IS NOT NULL AND later <> earlier`,
      ),
      // A user listed twice keeps its latest row (highest rowid).
      dropEarlierListings: db.prepare(
        `DELETE FROM users WHERE rowid IN (
           SELECT rowid FROM (SELECT rowid, row_number() OVER (PARTITION BY user_id ORDER BY rowid DESC) AS rank FROM users)
           WHERE rank > 1)`,
      ),
      bulkSource: db.prepare<[Cell[]]>(
        `INSERT INTO bulk_sources (owner, ${cols(SOURCE_COLUMNS)}) VALUES (${marks(SOURCE_COLUMNS.length + 1)})`,
      ),
      clearBulkSources: db.prepare(`DELETE FROM bulk_sources`),
      bulkWarning: db.prepare<[number, string, string, string]>(
        `INSERT INTO bulk_warnings (owner, user_id, field, problem) VALUES (?, ?, ?, ?)`,
      ),
      // In primary key order: appends only. Of a repeat listing, only the latest's.
      loadBulkWarnings: db.prepare<{ run: number; now: string }>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at)
         SELECT user_id, field, problem, @run, @now FROM bulk_warnings ORDER BY user_id, field`,
      ),
      loadBulkWarningsOfLatest: db.prepare<{ run: number; now: string }>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at)
         SELECT w.user_id, w.field, w.problem, @run, @now FROM bulk_warnings AS w
         WHERE w.owner = (SELECT rowid FROM users WHERE user_id = w.user_id)
         ORDER BY w.user_id, w.field`,
      ),
      clearBulkWarnings: db.prepare(`DELETE FROM bulk_warnings`),
      // In (user_id, slug) order: appends only.
      loadBulkSources: db.prepare(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)})
         SELECT ${cols(SOURCE_COLUMNS)} FROM bulk_sources ORDER BY user_id, slug`,
      ),
      // The owner test drops what a repeat listing replaced; it probes users_user_id in order.
      loadBulkSourcesOfLatest: db.prepare(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)})
         SELECT ${cols(SOURCE_COLUMNS, 's.')} FROM bulk_sources AS s
         WHERE s.owner = (SELECT rowid FROM users WHERE user_id = s.user_id)
         ORDER BY s.user_id, s.slug`,
      ),
      // Every user of a first sync is new: 'created', unless it lost its key (no visible change).
      // Through the covering index, in user_id order, so that user_changes_user only appends.
      recordCreated: db.prepare<{ run: number; now: string }>(
        `INSERT INTO user_changes (run_id, user_id, change, at)
         SELECT @run, user_id, 'created', @now FROM users INDEXED BY users_content WHERE deleted_at IS NULL ORDER BY user_id`,
      ),
      keyLosers: db.prepare<[], { user_id: string; team_id: string; client_user_id: string; winner: string }>(
        `SELECT user_id, team_id, client_user_id, winner FROM (
           SELECT user_id, team_id, client_user_id,
             row_number() OVER w AS rank, first_value(user_id) OVER w AS winner
           FROM users WHERE deleted_at IS NULL
           WINDOW w AS (PARTITION BY team_id, client_user_id ORDER BY rowid DESC))
         WHERE rank > 1`,
      ),
    };
  }

  /** Whether a run starting now may load in bulk. Call inside the run's transaction. */
  mirrorIsEmpty(): boolean {
    return this.s.isEmpty.get() === 1;
  }

  /** The user_id of every row written so far, repeats included (src/sync/run-ledger.ts counts them exactly when it must). */
  userIds(): Iterable<string> {
    return this.s.userIds.iterate();
  }

  /** Drops the secondary indexes, inside the run's transaction. */
  begin(): BulkLoad {
    const indexes = this.s.secondaryIndexes.all();
    for (const { name } of indexes) this.db.exec(`DROP INDEX main."${name.replaceAll('"', '""')}"`);
    return { indexes };
  }

  /** One listing, as it came: a repeat of an earlier one is settled by `finish`. No row held it before. */
  insert(write: UserWrite, now: string): undefined {
    const { record } = write;
    const userId = record.user.user_id;
    const owner = Number(this.s.insertUser.run(userValues(record, write.digest, now)).lastInsertRowid);
    for (const source of toSourceRows(record.user)) {
      const values: Cell[] = [owner];
      for (const c of SOURCE_COLUMNS) values.push(source[c]);
      this.s.bulkSource.run(values);
    }
    for (const w of record.warnings) this.s.bulkWarning.run(owner, userId, w.field, w.problem);
    return undefined;
  }

  /**
   * The users indexes, built again (the user_id key first, dropping the
   * earlier rows of users listed twice: what follows looks users up by it),
   * settling client key conflicts; the sources and warnings of the rows
   * kept, sorted, then the sources' indexes; the change rows. Returns how
   * many listings were repeats.
   */
  finish(load: BulkLoad, runId: number, now: string): number {
    const ofUsers = load.indexes.filter((i) => i.tbl_name === 'users');
    ofUsers.sort((a, b) => Number(b.name === USER_KEY) - Number(a.name === USER_KEY));
    let repeats = 0;
    for (const index of ofUsers) {
      if (index.name === USER_KEY) repeats = this.buildDroppingRepeats(index.sql);
      else this.buildSettlingKeys(index.sql, now);
    }
    (repeats > 0 ? this.s.loadBulkSourcesOfLatest : this.s.loadBulkSources).run();
    this.s.clearBulkSources.run();
    (repeats > 0 ? this.s.loadBulkWarningsOfLatest : this.s.loadBulkWarnings).run({ run: runId, now });
    this.s.clearBulkWarnings.run();
    for (const index of load.indexes) if (index.tbl_name !== 'users') this.db.exec(index.sql);
    this.s.recordCreated.run({ run: runId, now });
    return repeats;
  }

  /** Builds the unique user_id key; if a user was listed twice, its earlier rows go and the build is retried. */
  private buildDroppingRepeats(sql: string): number {
    try {
      this.db.exec(sql);
      return 0;
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      for (const r of this.s.relistedUnderOtherKey.all()) {
        this.writes.conflicts.add({ kind: 'user_id', userId: r.user_id, earlier: r.earlier, later: r.later });
      }
      const repeats = this.s.dropEarlierListings.run().changes;
      this.db.exec(sql);
      return repeats;
    }
  }

  /** Builds an index; if two active users hold one client key, the later-written keeps it and the build is retried. */
  private buildSettlingKeys(sql: string, now: string): void {
    try {
      this.db.exec(sql);
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      for (const loser of this.s.keyLosers.all()) {
        this.writes.softDelete(loser.user_id, now);
        this.writes.conflicts.add({
          kind: 'client_user_id',
          teamId: loser.team_id,
          clientUserId: loser.client_user_id,
          earlier: loser.user_id,
          later: loser.winner,
        });
      }
      this.db.exec(sql);
    }
  }
}

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string } | null)?.code === 'SQLITE_CONSTRAINT_UNIQUE';
}
