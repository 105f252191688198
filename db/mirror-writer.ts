/**
 * The only code that writes the mirror. A sync run writes what it reads
 * straight into the mirror's tables, page by page as the pages arrive, all
 * inside one write transaction (BEGIN IMMEDIATE) opened by `beginRun` and
 * committed by `publish`: the SQLite work overlaps the requests still in
 * flight, and there is no copy of the whole directory after the scan. In WAL
 * mode readers keep their snapshot of the previous committed mirror until
 * that COMMIT, so analytics and offline resolve see the previous complete
 * mirror or the new one, never a half-applied run. A failed run is rolled
 * back; after a kill -9 SQLite discards the uncommitted frames on the next
 * open, leaving the run's row, which `beginRun` marks interrupted.
 *
 * What the run has seen lives in this process: which users the scan listed,
 * and the content hash of every user active at the start, as fingerprints in
 * a RunLedger (an unchanged user costs a compare, no SQLite call). Stage and
 * publish a run on the same MirrorWriter.
 *
 * The write lock is held for the whole run. Other writers of the mirror wait
 * for it: an online resolve up to RESOLVE_WRITE_WAIT_MS, a second sync's
 * lease claim (which takes it as "held", jobs/sync-lease.ts). The lease's
 * renewals run on this connection, inside the transaction. Rejected records
 * are buffered and written after the transaction ends (see stageRejected).
 *
 * Decisions (documented for analytics in db/SCHEMA.md):
 * - `last_seen_at` is when the row was last written from upstream data, not
 *   when the user was last listed: touching every row on every run would
 *   rewrite the whole table into the WAL each time. That an active user was
 *   present upstream is told by the last run with `swept = 1`.
 * - A soft-deleted user seen again is restored and recorded as 'created'.
 * - One change row per user and run, from the state before the run to the
 *   state after it; a user listed twice keeps its latest listing.
 * - At most one active user per (team_id, client_user_id). When a record
 *   claims a key an active user holds, the newer record wins and the holder
 *   is soft-deleted ('deleted', counted as superseded), whatever the run's status:
 *   the index cannot hold both, and the claim itself is upstream's word.
 * - A rejected record whose user_id can be read still counts as seen, so its
 *   user is never a deletion candidate only because its latest record was malformed.
 * - `field_warnings` holds the warnings of each user's stored record: they
 *   are replaced whenever the user's row is written, and only then.
 */
import { hostname } from 'node:os';
import type { Db } from './open.js';
import type { User } from '../src/service/schemas.js';
import type { FieldWarning } from '../src/service/user-record.js';
import { contentHash, needsWrite, sameContent, SOURCE_COLUMNS, toSourceRows, toUserRow, USER_COLUMNS, type LiveState } from './user-row.js';
import { RunLedger, type Sighting } from './run-ledger.js';

export type { Sighting } from './run-ledger.js';

export interface StagedRecord {
  /** The parsed record: fields that broke their rule are absent. */
  user: User;
  /** The record's text exactly as received (its bytes, from a sync), unknown fields included. */
  rawJson: string;
  /** The fields dropped from `user`, stored in `field_warnings`. */
  warnings: readonly FieldWarning[];
}

/** One listing, with what the ledger said of it; `record` is needed for the sightings that write. */
export interface SightedRecord {
  userId: string;
  digest: string;
  sighting: Sighting;
  record?: StagedRecord;
}

export interface StagePageResult {
  /** Records processed: every record of the page. */
  seen: number;
  /** Records staged for writing: new, changed or reappearing users (a repeat listing counts again). */
  changed: number;
  /** Records whose user_id was already seen in this run, this page included: drift. */
  duplicates: number;
}

export interface RejectedRecordInput {
  offset: number;
  index: number;
  reason: string;
  raw: unknown;
}

export interface PublishResult {
  created: number;
  updated: number;
  /** Swept plus superseded. */
  deleted: number;
  /** Of `deleted`: active users whose (team_id, client_user_id) a newer record took over. */
  superseded: number;
}

export type RunStatus = 'succeeded' | 'partial' | 'failed';

export interface FinishRunInput {
  status: RunStatus;
  totalAtEnd?: number;
  pages: number;
  usersSeen: number;
  error?: string;
  created?: number;
  updated?: number;
  deleted?: number;
  /** Defaults to the rejected records stored for the run. */
  rejected?: number;
  /** Defaults to the duplicates counted by stagePage in the run. */
  duplicates?: number;
  sweepSkippedReason?: string;
  candidates?: CandidateCounts;
}

/** What became of the active users a run did not list (src/sync/deletion-check.ts). */
export interface CandidateCounts {
  /** Active users missing from the listing. */
  candidates: number;
  /** Confirmed gone upstream (and deleted, unless something else deleted them first). */
  confirmedGone: number;
  /** Still there upstream: the listing skipped them. Kept. */
  stillThere: number;
  /** Resolve failed after retries. Kept, checked again next run. */
  unverified: number;
  /** Beyond SYNC_MAX_VERIFY, or held back with the whole run. Kept, checked again next run. */
  deferred: number;
}

/** What publish applies besides the staged rows. */
export interface PublishDeletions {
  /** True when the run settled its deletion candidates (recorded as `swept`). */
  deletionsChecked: boolean;
  /** user_ids the service confirmed gone; those still active are soft-deleted. */
  deletions: readonly string[];
}

export type RefreshChange = 'created' | 'updated' | 'unchanged';

export interface RefreshResult {
  change: RefreshChange;
  /** user_ids soft-deleted because this user now holds their client_user_id. */
  superseded: string[];
}

export interface MirrorWriterOptions {
  /** Page cache of the mirror, KiB. The run's dirty pages beyond it spill into the WAL (uncommitted). */
  cacheKiB?: number;
}

const cols = (names: readonly string[], prefix = '') => names.map((c) => prefix + c).join(', ');
const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');
const updateFromExcluded = USER_COLUMNS.filter((c) => c !== 'user_id')
  .map((c) => `${c} = excluded.${c}`)
  .join(', ');

type Cell = string | number | null;
type Bind = Record<string, Cell>;

interface SecondaryIndex {
  name: string;
  sql: string;
}

interface RejectedRow {
  offset: number;
  index: number;
  userId: string | null;
  clientUserId: string | null;
  reason: string;
  raw: string;
  at: string;
}

/** A first sync's state (see OpenRun.bulk). */
interface BulkLoad {
  indexes: SecondaryIndex[];
  /** Users listed again in the run: their earlier sources are still in bulk_sources. */
  repeats: number;
}

/** The run open on this writer. */
interface OpenRun {
  id: number;
  duplicates: number;
  /** Set while the run's write transaction is open; undefined once published (or rolled back). */
  ledger: RunLedger | undefined;
  /** A page failed to apply after the ledger counted its records: publishing would lie. */
  broken: boolean;
  /**
   * The mirror was empty at the start: the secondary indexes of users and
   * connected_sources were dropped inside the run's transaction, rows are
   * inserted plainly, and key conflicts are settled before the indexes are
   * built again at publish.
   */
  bulk: BulkLoad | undefined;
  /** Rejected records, written by finishRun after the run's transaction ends (see stageRejected). */
  rejected: RejectedRow[];
  rejectedBytes: number;
}

/**
 * Default page cache, KiB. It fills up on a large run and stays resident, so
 * it counts fully in the run's RSS; a first sync writes mostly appended pages,
 * which gain nothing from a larger cache.
 */
const CACHE_KIB = 16_384;

/**
 * Rejected records kept per run, in memory until the run's transaction ends.
 * Beyond either bound they are counted (sync_runs.rejected) but not stored:
 * a run where every record is malformed must not hold them all in memory.
 */
const REJECTED_KEPT = 10_000;
const REJECTED_KEPT_BYTES = 32 * 1024 * 1024;

/**
 * A first sync's source rows, in arrival order, until publish inserts them
 * into connected_sources sorted: its primary key is (user_id, slug), and rows
 * inserted in random user_id order each land on a random page, which costs
 * several times an append once the table outgrows the page cache. TEMP: in
 * this connection, and inside the run's transaction like everything else.
 * `owner` is the users rowid the row was written for, so a repeat listing's
 * earlier rows can be told apart without an index.
 */
const BULK_SOURCES_SQL = /* sql */ `
CREATE TEMP TABLE IF NOT EXISTS bulk_sources (
  owner INTEGER NOT NULL, user_id TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL,
  logo TEXT, created_on TEXT, descriptor TEXT NOT NULL
);
`;

/** A run with no deletion candidates, or one that never got to count them. */
export const NO_CANDIDATES: CandidateCounts = { candidates: 0, confirmedGone: 0, stillThere: 0, unverified: 0, deferred: 0 };

/** Rows per statement when loading the active users and when sweeping. */
const BATCH = 20_000;

export class MirrorWriter {
  private run: OpenRun | undefined;

  private readonly s;

  constructor(
    private readonly db: Db,
    private readonly clock: () => Date = () => new Date(),
    options: MirrorWriterOptions = {},
  ) {
    db.pragma(`cache_size = -${options.cacheKiB ?? CACHE_KIB}`);
    // A first sync commits a WAL the size of the mirror; once checkpointed, give the disk back.
    db.pragma('journal_size_limit = 67108864');
    db.exec(BULK_SOURCES_SQL);
    this.s = {
      // --- runs ---
      interruptRuns: db.prepare<Bind>(
        `UPDATE sync_runs SET status = 'failed', finished_at = @now,
           error = CASE WHEN published_at IS NULL THEN 'interrupted' ELSE 'interrupted after publish' END
         WHERE status = 'running'`,
      ),
      insertRun: db.prepare<Bind>(
        `INSERT INTO sync_runs (started_at, status, total_at_start, pid, host) VALUES (@now, 'running', @total, @pid, @host)`,
      ),
      runState: db.prepare<[number], { status: string; published_at: string | null }>(
        `SELECT status, published_at FROM sync_runs WHERE id = ?`,
      ),
      finishRun: db.prepare<Bind>(
        `UPDATE sync_runs SET status = @status, finished_at = @now, total_at_end = @totalAtEnd, pages = @pages,
           users_seen = @usersSeen, error = @error,
           created = coalesce(@created, created), updated = coalesce(@updated, updated), deleted = coalesce(@deleted, deleted),
           rejected = coalesce(@rejected, (SELECT count(*) FROM rejected_records WHERE run_id = @run)),
           duplicates = @duplicates, sweep_skipped_reason = @sweepSkippedReason,
           candidates = @candidates, confirmed_gone = @confirmedGone, still_there = @stillThere,
           unverified = @unverified, deferred = @deferred
         WHERE id = @run`,
      ),
      insertRejected: db.prepare<Bind>(
        `INSERT INTO rejected_records (run_id, page_offset, record_index, user_id, client_user_id, reason, raw, at)
         VALUES (@run, @offset, @index, @userId, @clientUserId, @reason, @raw, @at)`,
      ),

      // --- the ledger and the deletion candidates ---
      // Keyset pages over the covering index: bounded memory, no table rows read. One string per
      // row, split in JS, costs about half of two columns.
      activeHashes: db
        .prepare<[string], string>(
          `SELECT user_id || char(9) || content_hash FROM users INDEXED BY users_content
           WHERE user_id > ? AND deleted_at IS NULL ORDER BY user_id LIMIT ${BATCH}`,
        )
        .pluck(),
      // Deleted users too: one active at the start may have been deleted online since.
      userIds: db
        .prepare<[string], string>(
          `SELECT user_id FROM users INDEXED BY users_content WHERE user_id > ? ORDER BY user_id LIMIT ${BATCH}`,
        )
        .pluck(),
      clientIdsOf: db.prepare<[string], { user_id: string; client_user_id: string }>(
        `SELECT u.user_id, u.client_user_id FROM json_each(?) AS j JOIN users AS u ON u.user_id = j.value`,
      ),
      isEmpty: db
        .prepare<[], number>(`SELECT NOT EXISTS (SELECT 1 FROM users) AND NOT EXISTS (SELECT 1 FROM connected_sources)`)
        .pluck(),
      secondaryIndexes: db.prepare<[], SecondaryIndex>(
        `SELECT name, sql FROM sqlite_schema
         WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ('users', 'connected_sources')`,
      ),

      // --- one user, applied as its page arrives (and by refreshUser) ---
      liveUser: db.prepare<[string], LiveState & { raw: string }>(
        `SELECT content_hash, deleted_at, raw FROM users WHERE user_id = ?`,
      ),
      isDeleted: db.prepare<[string], number>(`SELECT deleted_at IS NOT NULL FROM users WHERE user_id = ?`).pluck(),
      parkUser: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ? AND deleted_at IS NULL`),
      holdersOfKey: db
        .prepare<[string, string, string], string>(
          `SELECT user_id FROM users WHERE team_id = ? AND client_user_id = ? AND deleted_at IS NULL AND user_id <> ?`,
        )
        .pluck(),
      softDelete: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ?`),
      // Positional binds: on a first sync this runs once per user, and named ones cost more.
      insertUser: db.prepare<[Cell[]]>(
        `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
         VALUES (${marks(USER_COLUMNS.length + 2)}, NULL)`,
      ),
      upsertUser: db.prepare<[Cell[]]>(
        `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
         VALUES (${marks(USER_COLUMNS.length + 2)}, NULL)
         ON CONFLICT (user_id) DO UPDATE SET ${updateFromExcluded}, last_seen_at = excluded.last_seen_at, deleted_at = NULL`,
      ),
      deleteUser: db.prepare<[string]>(`DELETE FROM users WHERE user_id = ?`),
      dropSources: db.prepare<[string]>(`DELETE FROM connected_sources WHERE user_id = ?`),
      insertSource: db.prepare<[Cell[]]>(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)}) VALUES (${marks(SOURCE_COLUMNS.length)})`,
      ),
      dropWarnings: db.prepare<[string]>(`DELETE FROM field_warnings WHERE user_id = ?`),
      insertWarning: db.prepare<[string, string, string, number | null, string]>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at) VALUES (?, ?, ?, ?, ?)`,
      ),
      insertChange: db.prepare<[number | null, string, string, string]>(
        `INSERT INTO user_changes (run_id, user_id, change, at) VALUES (?, ?, ?, ?)`,
      ),
      // Through user_changes_user: a user's change rows, few, then the run's among them.
      runChange: db.prepare<[string, number], { id: number; change: string }>(
        `SELECT id, change FROM user_changes WHERE user_id = ? AND run_id = ?`,
      ),
      setChange: db.prepare<[string, string, number]>(`UPDATE user_changes SET change = ?, at = ? WHERE id = ?`),
      dropChange: db.prepare<[number]>(`DELETE FROM user_changes WHERE id = ?`),

      bulkSource: db.prepare<[Cell[]]>(
        `INSERT INTO bulk_sources (owner, ${cols(SOURCE_COLUMNS)}) VALUES (${marks(SOURCE_COLUMNS.length + 1)})`,
      ),
      clearBulkSources: db.prepare(`DELETE FROM bulk_sources`),

      // --- publish ---
      // In (user_id, slug) order: appends only. The owner test drops what a repeat listing replaced;
      // it probes the users primary key in order, without reading the rows.
      loadBulkSources: db.prepare(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)})
         SELECT ${cols(SOURCE_COLUMNS)} FROM bulk_sources ORDER BY user_id, slug`,
      ),
      loadBulkSourcesOfLatest: db.prepare(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)})
         SELECT ${cols(SOURCE_COLUMNS, 's.')} FROM bulk_sources AS s
         WHERE s.owner = (SELECT rowid FROM users WHERE user_id = s.user_id)
         ORDER BY s.user_id, s.slug`,
      ),
      // Every user of a first sync is new: 'created', unless it lost its key (no visible change).
      // Through the covering index, in user_id order, so that user_changes_user only appends.
      recordBulkCreated: db.prepare<Bind>(
        `INSERT INTO user_changes (run_id, user_id, change, at)
         SELECT @run, user_id, 'created', @now FROM users INDEXED BY users_content WHERE deleted_at IS NULL ORDER BY user_id`,
      ),
      // Two users of one key, in a first sync: the later write (higher rowid: a repeat listing is
      // deleted and inserted again) keeps the key.
      keyLosers: db
        .prepare<[], string>(
          `SELECT user_id FROM (
             SELECT user_id, row_number() OVER (PARTITION BY team_id, client_user_id ORDER BY rowid DESC) AS rank
             FROM users WHERE deleted_at IS NULL)
           WHERE rank > 1`,
        )
        .pluck(),
      // Still active: a user soft-deleted since the run began (superseded, or online) stays as it is.
      recordDeletions: db.prepare<Bind>(
        `INSERT INTO user_changes (run_id, user_id, change, at)
         SELECT @run, u.user_id, 'deleted', @now FROM json_each(@ids) AS j JOIN users AS u ON u.user_id = j.value
         WHERE u.deleted_at IS NULL`,
      ),
      applyDeletions: db.prepare<Bind>(
        `UPDATE users SET deleted_at = @now WHERE user_id IN (SELECT value FROM json_each(@ids)) AND deleted_at IS NULL`,
      ),
      countChanges: db.prepare<[number], { change: string; n: number }>(
        `SELECT change, count(*) AS n FROM user_changes WHERE run_id = ? GROUP BY change`,
      ),
      markPublished: db.prepare<Bind>(
        `UPDATE sync_runs SET created = @created, updated = @updated, deleted = @deleted, superseded = @superseded,
           swept = @swept, published_at = @now
         WHERE id = @run`,
      ),
    };
  }

  /**
   * Starts a run: commits its row, then opens the run's write transaction
   * (BEGIN IMMEDIATE), which stays open until publish commits it or
   * finishRun rolls it back. Any run still 'running' is left over from a
   * process that died (one writer per mirror file is assumed) and becomes
   * 'failed' / 'interrupted'; a run left open on this connection is rolled back.
   */
  beginRun(totalAtStart?: number): number {
    if (this.db.inTransaction) this.db.exec('ROLLBACK');
    this.run = undefined;
    const now = this.now();
    const id = this.db
      .transaction(() => {
        this.s.interruptRuns.run({ now });
        const inserted = this.s.insertRun.run({ now, total: totalAtStart ?? null, pid: process.pid, host: hostname() });
        return Number(inserted.lastInsertRowid);
      })
      .immediate();
    this.db.exec('BEGIN IMMEDIATE');
    try {
      const ledger = new RunLedger(this.activeUsers());
      const bulk = this.s.isEmpty.get() === 1 ? { indexes: this.dropSecondaryIndexes(), repeats: 0 } : undefined;
      this.run = { id, duplicates: 0, ledger, broken: false, bulk, rejected: [], rejectedBytes: 0 };
    } catch (err) {
      this.db.exec('ROLLBACK');
      throw err;
    }
    return id;
  }

  /**
   * Writes one page of parsed records into the run's transaction. An
   * unchanged user costs a hash and a compare in memory; only new, changed
   * and reappearing users reach SQLite. A user_id listed twice in a run
   * keeps its latest listing.
   */
  stagePage(runId: number, records: readonly StagedRecord[]): StagePageResult {
    const sighted = records.map((record) => {
      const digest = contentHash(record.rawJson);
      return { userId: record.user.user_id, record, digest, sighting: this.sight(runId, record.user.user_id, digest) };
    });
    return this.stageSighted(runId, sighted);
  }

  /**
   * Records one listing of a user in the run's ledger and says what it takes:
   * the sync asks this from the record's bytes, before parsing it, so that an
   * unchanged record is never parsed. Every sighting but 'unchanged' must
   * then reach stageSighted with its record.
   */
  sight(runId: number, userId: string, digest: string): Sighting {
    return this.openLedger(runId).ledger.sight(userId, digest);
  }

  /**
   * Applies what `sight` asked for to the mirror's tables, inside the run's
   * transaction: readers see none of it until publish commits. A page is
   * applied whole or not at all (a savepoint); a page that fails breaks the
   * run, which can then only fail.
   */
  stageSighted(runId: number, sighted: readonly SightedRecord[]): StagePageResult {
    const { run } = this.openLedger(runId);
    let changed = 0;
    let duplicates = 0;
    for (const { sighting } of sighted) {
      if (sighting === 'write' || sighting === 'repeat-write') changed++;
      if (sighting === 'repeat-write' || sighting === 'repeat-unchanged') duplicates++;
    }
    if (changed > 0 || duplicates > 0) {
      const now = this.now();
      try {
        this.db.transaction(() => {
          for (const item of sighted) if (item.sighting !== 'unchanged') this.applySighted(run, item, now);
        })();
      } catch (err) {
        run.broken = true;
        throw err;
      }
    }
    run.duplicates += duplicates;
    return { seen: sighted.length, changed, duplicates };
  }

  /**
   * Keeps a record that failed validation, for diagnosis. Buffered and
   * written by finishRun, after the run's transaction ends, so that it
   * describes the run whether it published or rolled back (up to
   * REJECTED_KEPT records or REJECTED_KEPT_BYTES; beyond, only counted).
   */
  stageRejected(runId: number, rejected: RejectedRecordInput): void {
    const { run, ledger } = this.openLedger(runId);
    const userId = stringField(rejected.raw, 'user_id');
    const raw = JSON.stringify(rejected.raw) ?? 'null';
    if (run.rejected.length < REJECTED_KEPT && run.rejectedBytes + raw.length <= REJECTED_KEPT_BYTES) {
      run.rejected.push({
        offset: rejected.offset,
        index: rejected.index,
        userId: userId ?? null,
        clientUserId: stringField(rejected.raw, 'client_user_id') ?? null,
        reason: rejected.reason,
        raw,
        at: this.now(),
      });
      run.rejectedBytes += raw.length;
    }
    if (userId !== undefined) ledger.sightUnparsed(userId);
  }

  /** Active users not seen in this run so far: the deletion candidates. */
  countUnseenActive(runId: number): number {
    return this.openLedger(runId).ledger.unseenActiveCount;
  }

  /** Every deletion candidate's user_id: for callers that know them all gone (tests, tools). */
  listUnseenActive(runId: number): string[] {
    const { ledger } = this.openLedger(runId);
    return ledger.unseenActiveCount === 0 ? [] : [...this.unseenActiveIds(ledger)];
  }

  /**
   * Up to `limit` of the deletion candidates, for the sync to check upstream
   * (src/sync/deletion-check.ts). Picked at random, so that when there are
   * more than a run may check, each is reached by some later run.
   */
  pickUnseenActive(runId: number, limit: number): Array<{ user_id: string; client_user_id: string }> {
    const { ledger } = this.openLedger(runId);
    if (ledger.unseenActiveCount === 0) return [];
    const picked = reservoirSample(this.unseenActiveIds(ledger), Math.max(0, Math.floor(limit)));
    if (picked.length === 0) return [];
    return this.s.clientIdsOf.all(JSON.stringify(picked));
  }

  /**
   * Ends the run's transaction with what is left to do: on a first sync,
   * settle key conflicts and build the secondary indexes again; apply the
   * deletions the service confirmed; count the changes; mark the run
   * published; COMMIT. Readers see the previous mirror until that COMMIT and
   * the whole run after it. If anything before the COMMIT throws, the run is
   * left as it was before publish, still open, for finishRun to roll back.
   */
  publish(runId: number, opts: PublishDeletions): PublishResult {
    const { run } = this.openLedger(runId);
    if (run.broken) throw new Error(`sync run ${runId}: a page failed to stage; the run can only fail`);
    const result = this.db.transaction((): PublishResult => {
      const state = this.s.runState.get(runId);
      if (state === undefined || state.status !== 'running' || state.published_at !== null) {
        throw new Error(`sync run ${runId} is not a running, unpublished run`);
      }
      const now = this.now();
      if (run.bulk !== undefined) this.finishBulkLoad(run.bulk, runId, now);
      let swept = 0;
      for (const batch of batches(new Set(opts.deletions), BATCH)) {
        const ids = JSON.stringify(batch);
        this.s.recordDeletions.run({ run: runId, now, ids });
        swept += this.s.applyDeletions.run({ now, ids }).changes;
      }
      const counts = { created: 0, updated: 0, deleted: 0 };
      for (const { change, n } of this.s.countChanges.all(runId)) {
        if (change === 'created' || change === 'updated' || change === 'deleted') counts[change] = n;
      }
      // Every deletion not confirmed upstream was a key taken over.
      const superseded = counts.deleted - swept;
      this.s.markPublished.run({ run: runId, now, ...counts, superseded, swept: opts.deletionsChecked ? 1 : 0 });
      return { ...counts, superseded };
    })();
    this.db.exec('COMMIT');
    run.ledger = undefined;
    return result;
  }

  /**
   * Records how the run ended. A run not published by now is rolled back:
   * nothing of it reaches the mirror. Its rejected records are written here,
   * with the run's row, in one short transaction.
   */
  finishRun(runId: number, result: FinishRunInput): void {
    const run = this.run?.id === runId ? this.run : undefined;
    // Still holding its ledger: never published, so its transaction is rolled back.
    if (run?.ledger !== undefined) {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      run.ledger = undefined;
    }
    this.db
      .transaction(() => {
        for (const r of run?.rejected ?? []) this.s.insertRejected.run({ run: runId, ...r });
        this.s.finishRun.run({
          run: runId,
          now: this.now(),
          status: result.status,
          totalAtEnd: result.totalAtEnd ?? null,
          pages: result.pages,
          usersSeen: result.usersSeen,
          error: result.error ?? null,
          created: result.created ?? null,
          updated: result.updated ?? null,
          deleted: result.deleted ?? null,
          rejected: result.rejected ?? null,
          duplicates: result.duplicates ?? run?.duplicates ?? 0,
          sweepSkippedReason: result.sweepSkippedReason ?? null,
          ...(result.candidates ?? NO_CANDIDATES),
        });
      })
      .immediate();
    if (run !== undefined) this.run = undefined;
  }

  /**
   * Writes one user as the service just returned it (online resolve), in its
   * own transaction; change rows carry run_id NULL. Takes the user's
   * (team_id, client_user_id) over from any other active holder, which is
   * soft-deleted. Never deletes anything for a 404: that is not a scan.
   * A record whose content equals the stored one in another key order is
   * 'unchanged' and keeps the listing's text, so the next sync sees no
   * change either. The user's field warnings are replaced with the record's.
   */
  refreshUser(record: StagedRecord): RefreshResult {
    const { user, rawJson } = record;
    const digest = contentHash(rawJson);
    return this.db
      .transaction((): RefreshResult => {
        const now = this.now();
        const live = this.s.liveUser.get(user.user_id);
        if (!needsWrite(live, digest)) return { change: 'unchanged', superseded: [] };
        // Same content in another key order: rewriting would log a change that is not one.
        if (live !== undefined && live.deleted_at === null && sameContent(JSON.parse(live.raw), JSON.parse(rawJson))) {
          return { change: 'unchanged', superseded: [] };
        }
        const superseded = this.takeKey(user, now);
        for (const id of superseded) {
          this.s.softDelete.run(now, id);
          this.s.insertChange.run(null, id, 'deleted', now);
        }
        this.s.upsertUser.run(this.userValues(record, digest, now));
        this.replaceDetails(record, null, now);
        const change: RefreshChange = live === undefined || live.deleted_at !== null ? 'created' : 'updated';
        this.s.insertChange.run(null, user.user_id, change, now);
        return { change, superseded };
      })
      .immediate();
  }

  private applySighted(run: OpenRun, item: SightedRecord, now: string): void {
    const { record } = item;
    if (record === undefined) throw new TypeError(`stageSighted: a '${item.sighting}' sighting without its record`);
    if (run.bulk !== undefined) this.insertPlainly(run, run.bulk, record, item.digest, item.sighting !== 'write', now);
    else this.applyUser(run, record, item.digest, item.sighting, now);
  }

  /**
   * A first sync: nothing was there, so a listing is an insert. Its sources
   * wait in bulk_sources and its change row is written at publish (both
   * sorted). A repeat replaces the earlier listing's row (delete, insert:
   * the later listing gets the higher rowid, which settles key conflicts at
   * publish).
   */
  private insertPlainly(run: OpenRun, bulk: BulkLoad, record: StagedRecord, digest: string, repeat: boolean, now: string): void {
    const userId = record.user.user_id;
    if (repeat) {
      bulk.repeats++;
      this.s.deleteUser.run(userId);
      this.s.dropWarnings.run(userId);
    }
    const owner = this.s.insertUser.run(this.userValues(record, digest, now)).lastInsertRowid;
    for (const source of toSourceRows(record.user)) {
      const values: Cell[] = [Number(owner)];
      for (const c of SOURCE_COLUMNS) values.push(source[c]);
      this.s.bulkSource.run(values);
    }
    for (const w of record.warnings) this.s.insertWarning.run(userId, w.field, w.problem, run.id, now);
  }

  /**
   * One user into a mirror that had users, as refreshUser does it, with the
   * change kept to one row per user and run: the state before the run
   * against the state after it (no/yes 'created', yes/yes 'updated', yes/no
   * 'deleted', no/no none).
   */
  private applyUser(run: OpenRun, record: StagedRecord, digest: string, sighting: Sighting, now: string): void {
    const userId = record.user.user_id;
    const deleted = this.s.isDeleted.get(userId);
    // Only a repeat, or a user deleted now (maybe superseded earlier in this run), can have a change row of this run.
    const prior = sighting !== 'write' || deleted === 1 ? this.s.runChange.get(userId, run.id) : undefined;
    const activeBefore = prior !== undefined ? prior.change !== 'created' : deleted === 0;
    for (const holder of this.takeKey(record.user, now)) this.retire(run.id, holder, now);
    this.s.upsertUser.run(this.userValues(record, digest, now));
    this.replaceDetails(record, run.id, now);
    // A later listing equal to the mirror at the start (the ledger says so): the run changes nothing of this user.
    const change = sighting === 'repeat-unchanged' ? undefined : activeBefore ? 'updated' : 'created';
    this.recordChange(run.id, userId, prior, change, now);
  }

  /** Soft-deletes the holder of a key another user takes, as 'deleted' unless this run created it. */
  private retire(runId: number, userId: string, now: string): void {
    this.s.softDelete.run(now, userId);
    const prior = this.s.runChange.get(userId, runId);
    this.recordChange(runId, userId, prior, prior?.change === 'created' ? undefined : 'deleted', now);
  }

  private recordChange(runId: number, userId: string, prior: { id: number } | undefined, change: string | undefined, now: string): void {
    if (prior === undefined) {
      if (change !== undefined) this.s.insertChange.run(runId, userId, change, now);
    } else if (change === undefined) this.s.dropChange.run(prior.id);
    else this.s.setChange.run(change, now, prior.id);
  }

  /**
   * Takes the user out of the unique key index (its own key may move onto a
   * taken one), and returns the other active holders of its new key: the
   * newer record wins, the caller retires them.
   */
  private takeKey(user: User, now: string): string[] {
    this.s.parkUser.run(now, user.user_id);
    return this.s.holdersOfKey.all(user.team_id, user.client_user_id, user.user_id);
  }

  private userValues(record: StagedRecord, digest: string, now: string): Cell[] {
    const row = toUserRow(record.user, record.rawJson, digest);
    const values: Cell[] = [];
    for (const c of USER_COLUMNS) values.push(row[c]);
    values.push(now, now);
    return values;
  }

  private replaceDetails(record: StagedRecord, runId: number | null, now: string): void {
    this.s.dropSources.run(record.user.user_id);
    this.s.dropWarnings.run(record.user.user_id);
    this.insertDetails(record, runId, now);
  }

  private insertDetails(record: StagedRecord, runId: number | null, now: string): void {
    for (const source of toSourceRows(record.user)) this.s.insertSource.run(SOURCE_COLUMNS.map((c) => source[c]));
    for (const w of record.warnings) this.s.insertWarning.run(record.user.user_id, w.field, w.problem, runId, now);
  }

  /**
   * A first sync fills empty tables: dropping their secondary indexes and
   * building them again at publish (by sorting) costs about half of keeping
   * them up row by row. Inside the run's transaction: readers keep seeing the
   * indexes, and a crash or a failed run leaves them as they were.
   */
  private dropSecondaryIndexes(): SecondaryIndex[] {
    const indexes = this.s.secondaryIndexes.all();
    for (const { name } of indexes) this.db.exec(`DROP INDEX main."${name.replaceAll('"', '""')}"`);
    return indexes;
  }

  /**
   * Ends a first sync's load: the sources, sorted, then the dropped indexes
   * built again, then a change row per active user. Two users listed with
   * one key make the unique key index fail: then the later-written one keeps
   * the key, the others are soft-deleted (new in this run: no change row),
   * and the index is built again.
   */
  private finishBulkLoad(bulk: BulkLoad, runId: number, now: string): void {
    (bulk.repeats > 0 ? this.s.loadBulkSourcesOfLatest : this.s.loadBulkSources).run();
    this.s.clearBulkSources.run();
    let settled = false;
    for (const { sql } of bulk.indexes) {
      try {
        this.db.exec(sql);
      } catch (err) {
        if (settled || (err as { code?: string }).code !== 'SQLITE_CONSTRAINT_UNIQUE') throw err;
        settled = true;
        for (const userId of this.s.keyLosers.all()) this.s.softDelete.run(now, userId);
        this.db.exec(sql);
      }
    }
    this.s.recordBulkCreated.run({ run: runId, now });
  }

  private openLedger(runId: number): { run: OpenRun; ledger: RunLedger } {
    const run = this.run;
    if (run?.id !== runId) throw new Error(`sync run ${runId} is not the run staged on this writer (${run?.id ?? 'none'})`);
    if (run.ledger === undefined) throw new Error(`sync run ${runId} is already published`);
    return { run, ledger: run.ledger };
  }

  /** [user_id, content_hash] of every active user, in user_id order, a batch in memory at a time. */
  private *activeUsers(): Generator<[string, string]> {
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

  /**
   * Active users at the start not listed so far: what a sweep deletes. The
   * ledger holds fingerprints, not user_ids, so the candidates are read back
   * from the mirror, deleted rows included: one deleted online since the
   * start is still a candidate, as it was when the ledger kept the strings
   * (the sweep skips it, the deletion check may sample it).
   */
  private *unseenActiveIds(ledger: RunLedger): Generator<string> {
    for (let after = ''; ; ) {
      const ids = this.s.userIds.all(after);
      for (const userId of ids) if (ledger.isUnseenActive(userId)) yield userId;
      after = ids.at(-1) ?? after;
      if (ids.length < BATCH) return;
    }
  }

  private now(): string {
    return this.clock().toISOString();
  }
}

function* batches<T>(items: Iterable<T>, size: number): Generator<T[]> {
  let batch: T[] = [];
  for (const item of items) {
    batch.push(item);
    if (batch.length === size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

/** A uniform sample of up to `k` items, in one pass (Algorithm R). */
function reservoirSample<T>(items: Iterable<T>, k: number): T[] {
  const sample: T[] = [];
  if (k === 0) return sample;
  let n = 0;
  for (const item of items) {
    n++;
    if (sample.length < k) sample.push(item);
    else {
      const j = Math.floor(Math.random() * n);
      if (j < k) sample[j] = item;
    }
  }
  return sample;
}

function stringField(raw: unknown, key: string): string | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const value: unknown = (raw as Record<string, unknown>)[key];
  return typeof value === 'string' ? value : undefined;
}
