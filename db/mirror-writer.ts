/**
 * The only code that writes the mirror. A sync run stages what it reads,
 * page by page, then publishes it in one transaction, so analytics and
 * offline resolve see the previous complete mirror or the new one, never a
 * half-applied run.
 *
 * Staging lives in this process: which users the scan listed, and the
 * content hash of every user active at the start, as fingerprints in a
 * RunLedger (an unchanged user costs a compare, no SQLite call); the rows to write, in
 * TEMP tables of this connection. Neither reaches the mirror file or its WAL,
 * and both vanish with the process: after a kill -9 there is nothing to clean
 * up but the run's row, which `beginRun` marks interrupted. One consequence:
 * stage and publish a run on the same MirrorWriter.
 *
 * Decisions (documented for analytics in db/SCHEMA.md):
 * - `last_seen_at` is when the row was last written from upstream data, not
 *   when the user was last listed: touching every row on every run would
 *   rewrite the whole table into the WAL each time. That an active user was
 *   present upstream is told by the last run with `swept = 1`.
 * - A soft-deleted user seen again is restored and recorded as 'created'.
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
import { contentHash, needsWrite, sameContent, toSourceRows, toUserRow, type LiveState, type SourceRow } from './user-row.js';
import { RunLedger, type Sighting } from './run-ledger.js';

export type { Sighting } from './run-ledger.js';

export interface StagedRecord {
  /** The parsed record: fields that broke their rule are absent. */
  user: User;
  /** JSON.stringify of the record as received, unknown fields included. */
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
  /** Page cache of the mirror, KiB; also bounds publish's in-memory sorts. */
  cacheKiB?: number;
  /** Page cache of the staging tables, KiB; beyond it they spill to an unlinked temp file. */
  stagingCacheKiB?: number;
}

const STAGING_INDEXES = /* sql */ `
CREATE INDEX IF NOT EXISTS temp.stage_users_id ON stage_users (user_id, seq);
-- Covers every key question publish asks, so none of them reads the (large) staged rows.
CREATE INDEX IF NOT EXISTS temp.stage_users_key ON stage_users (team_id, client_user_id, seq, user_id);
`;

/**
 * Staged rows are appended in listing order (`seq`, shared with tombstones);
 * a later listing of the same user supersedes an earlier one at publish. The
 * two indexes exist only while publishing: maintained row by row they cost
 * more than the inserts themselves (random keys), built in one go they are
 * cheap. They are created here too, so that statements naming them prepare.
 */
const STAGING_SQL = /* sql */ `
CREATE TEMP TABLE IF NOT EXISTS stage_users (
  seq INTEGER PRIMARY KEY,
  user_id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  client_user_id TEXT NOT NULL,
  created_on TEXT,
  fallback_time_zone_id TEXT,
  fallback_time_zone_source_slug TEXT,
  fallback_time_zone_updated_at TEXT,
  fallback_birth_date TEXT,
  fallback_birth_date_source_slug TEXT,
  fallback_birth_date_updated_at TEXT,
  ingestion_start TEXT,
  ingestion_end TEXT,
  content_hash TEXT NOT NULL,
  -- JSON array of [slug, name, logo, created_on, descriptor]: one column instead of a row per source.
  sources TEXT NOT NULL,
  -- JSON array of [field, problem]; '[]' for a clean record.
  warnings TEXT NOT NULL,
  raw TEXT NOT NULL
);
-- Few records carry warnings: publish reads just those through this (partial, so cheap to keep up)
-- index instead of scanning every staged row once more.
CREATE INDEX IF NOT EXISTS temp.stage_users_warned ON stage_users (seq) WHERE warnings <> '[]';
-- A later listing that matched the mirror: drops any earlier staged row of the user.
CREATE TEMP TABLE IF NOT EXISTS stage_tombstones (seq INTEGER PRIMARY KEY, user_id TEXT NOT NULL);
${STAGING_INDEXES}
CREATE TEMP TABLE IF NOT EXISTS stage_losers (seq INTEGER PRIMARY KEY);
CREATE TEMP TABLE IF NOT EXISTS stage_deleted (user_id TEXT PRIMARY KEY, superseded INTEGER NOT NULL) WITHOUT ROWID;
`;

const USER_COLUMNS = [
  'user_id',
  'team_id',
  'client_user_id',
  'created_on',
  'fallback_time_zone_id',
  'fallback_time_zone_source_slug',
  'fallback_time_zone_updated_at',
  'fallback_birth_date',
  'fallback_birth_date_source_slug',
  'fallback_birth_date_updated_at',
  'ingestion_start',
  'ingestion_end',
  'content_hash',
  'raw',
] as const;
const SOURCE_COLUMNS = ['user_id', 'slug', 'name', 'logo', 'created_on', 'descriptor'] as const;

const cols = (names: readonly string[], prefix = '') => names.map((c) => prefix + c).join(', ');
const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');
const updateFromExcluded = USER_COLUMNS.filter((c) => c !== 'user_id')
  .map((c) => `${c} = excluded.${c}`)
  .join(', ');

type Cell = string | number | null;
type Bind = Record<string, Cell>;

/** Staged form of a record's warnings, expanded like the sources. */
function warningsJson(warnings: readonly FieldWarning[]): string {
  return warnings.length === 0 ? '[]' : JSON.stringify(warnings.map((w) => [w.field, w.problem]));
}

/** Staged form of a user's sources, expanded again with json_each at publish. */
function sourcesJson(rows: readonly SourceRow[]): string {
  return JSON.stringify(rows.map((r) => [r.slug, r.name, r.logo, r.created_on, r.descriptor]));
}

/** The run being staged on this writer. */
interface OpenRun {
  id: number;
  /** Listing order of staged rows and tombstones. */
  seq: number;
  duplicates: number;
  /** Undefined once published: the run can only be finished then. */
  ledger: RunLedger | undefined;
  /** A staging write failed after the ledger counted its records: publishing would lie. */
  broken: boolean;
}

/**
 * Default page caches, KiB. Both fill up on a large run and stay resident, so
 * they count fully in its RSS. Measured on 1M users (bench/sync.ts, 2 cores):
 * 64/128 MiB peaked at 464 MB RSS, 32/64 at 346 MB, 16/32 at 265 MB, with no
 * loss of speed from the smaller ones (change detection runs in the
 * RunLedger, not in SQLite; staged rows are appended, then read in order).
 */
const CACHE_KIB = 16_384;
const STAGING_CACHE_KIB = 32_768;

const NO_CANDIDATES: CandidateCounts = { candidates: 0, confirmedGone: 0, stillThere: 0, unverified: 0, deferred: 0 };

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
    // A first sync publishes a WAL the size of the mirror; once checkpointed, give the disk back.
    db.pragma('journal_size_limit = 67108864');
    // Staged rows are large and appended: bigger pages mean fewer writes when they spill to the
    // temp file, but publish reads them in user_id order, where big pages cost. 16 KiB measured
    // best of 4/16/64 KiB. Only takes effect before the connection's temp database exists.
    db.pragma('temp.page_size = 16384');
    db.exec(STAGING_SQL);
    db.pragma(`temp.cache_size = -${options.stagingCacheKiB ?? STAGING_CACHE_KIB}`);
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

      // --- staging ---
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
      // Positional binds: on a first sync this runs once per user, and named ones cost more.
      stageUser: db.prepare<[Cell[]]>(
        `INSERT INTO stage_users (seq, ${cols(USER_COLUMNS)}, sources, warnings) VALUES (${marks(USER_COLUMNS.length + 3)})`,
      ),
      stageTombstone: db.prepare<[number, string]>(`INSERT INTO stage_tombstones (seq, user_id) VALUES (?, ?)`),
      insertRejected: db.prepare<Bind>(
        `INSERT INTO rejected_records (run_id, page_offset, record_index, user_id, client_user_id, reason, raw, at)
         VALUES (@run, @offset, @index, @userId, @clientUserId, @reason, @raw, @now)`,
      ),

      // --- publish, in this order ---
      dropSupersededListings: db.prepare(
        `DELETE FROM stage_users WHERE seq IN (
           SELECT s.seq FROM stage_users AS s INDEXED BY stage_users_id
           WHERE EXISTS (SELECT 1 FROM stage_users AS t WHERE t.user_id = s.user_id AND t.seq > s.seq)
              OR EXISTS (SELECT 1 FROM stage_tombstones AS d WHERE d.user_id = s.user_id AND d.seq > s.seq))`,
      ),
      // Two staged users claiming one key: the one listed last wins, the others are "losers".
      findLosers: db.prepare(
        `INSERT INTO stage_losers (seq)
         SELECT s.seq FROM stage_users AS s
         WHERE EXISTS (SELECT 1 FROM stage_users AS t
                       WHERE t.team_id = s.team_id AND t.client_user_id = s.client_user_id AND t.seq > s.seq)`,
      ),
      // Active before -> after: no/yes 'created', yes/yes 'updated', yes/no 'deleted'; no/no (a
      // losing claim by an inactive user) changes nothing anyone can see and gets no change row.
      recordStagedChanges: db.prepare<Bind>(
        `INSERT INTO user_changes (run_id, user_id, change, at)
         SELECT @run, s.user_id,
                CASE WHEN l.seq IS NOT NULL THEN 'deleted'
                     WHEN u.user_id IS NOT NULL AND u.deleted_at IS NULL THEN 'updated'
                     ELSE 'created' END,
                @now
         FROM stage_users AS s INDEXED BY stage_users_id
         LEFT JOIN users AS u INDEXED BY users_content ON u.user_id = s.user_id
         LEFT JOIN stage_losers AS l ON l.seq = s.seq
         WHERE l.seq IS NULL OR (u.user_id IS NOT NULL AND u.deleted_at IS NULL)`,
      ),
      // Takes out of the unique index every staged active user whose key moves (or who loses its
      // key), so that applying the staged rows can never collide with a stale key.
      parkMovingUsers: db.prepare<Bind>(
        `UPDATE users SET deleted_at = @now
         WHERE user_id IN (
           SELECT s.user_id FROM stage_users AS s INDEXED BY stage_users_key CROSS JOIN users AS u
           WHERE u.user_id = s.user_id AND u.deleted_at IS NULL
             AND (u.team_id <> s.team_id OR u.client_user_id <> s.client_user_id
                  OR s.seq IN (SELECT seq FROM stage_losers)))`,
      ),
      findSuperseded: db.prepare(
        `INSERT OR IGNORE INTO stage_deleted (user_id, superseded)
         SELECT u.user_id, 1 FROM stage_users AS s INDEXED BY stage_users_key
         CROSS JOIN users AS u INDEXED BY users_active_client_user
         WHERE u.team_id = s.team_id AND u.client_user_id = s.client_user_id AND u.deleted_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM stage_users AS x WHERE x.user_id = u.user_id)`,
      ),
      // Still active: a user soft-deleted since the run began (an online resolve) stays as it is.
      deleteIds: db.prepare<[string]>(
        `INSERT OR IGNORE INTO stage_deleted (user_id, superseded)
         SELECT u.user_id, 0 FROM json_each(?) AS j JOIN users AS u ON u.user_id = j.value
         WHERE u.deleted_at IS NULL`,
      ),
      recordDeletions: db.prepare<Bind>(
        `INSERT INTO user_changes (run_id, user_id, change, at)
         SELECT @run, user_id, 'deleted', @now FROM stage_deleted`,
      ),
      applyDeletions: db.prepare<Bind>(
        `UPDATE users SET deleted_at = @now WHERE user_id IN (SELECT user_id FROM stage_deleted)`,
      ),
      applyStagedUsers: db.prepare<Bind>(
        `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
         SELECT ${cols(USER_COLUMNS, 's.')}, @now, @now,
                CASE WHEN s.seq IN (SELECT seq FROM stage_losers) THEN @now END
         FROM stage_users AS s WHERE true
         ON CONFLICT (user_id) DO UPDATE SET ${updateFromExcluded},
           last_seen_at = excluded.last_seen_at, deleted_at = excluded.deleted_at`,
      ),
      // Into an empty table: in primary-key order, so its b-tree only ever appends. `+` keeps the
      // planner off stage_users_id: a sort reads the staged rows in sequence, the index reads them
      // at random, which at a million rows costs more (measured).
      loadStagedUsers: db.prepare<Bind>(
        `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
         SELECT ${cols(USER_COLUMNS, 's.')}, @now, @now,
                CASE WHEN s.seq IN (SELECT seq FROM stage_losers) THEN @now END
         FROM stage_users AS s ORDER BY +s.user_id`,
      ),
      isEmpty: db
        .prepare<[], number>(`SELECT NOT EXISTS (SELECT 1 FROM users) AND NOT EXISTS (SELECT 1 FROM connected_sources)`)
        .pluck(),
      secondaryIndexes: db
        .prepare<[], { name: string; sql: string }>(
          `SELECT name, sql FROM sqlite_schema
           WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ('users', 'connected_sources')`,
        ),
      dropStagedUsersSources: db.prepare(
        `DELETE FROM connected_sources WHERE user_id IN (SELECT user_id FROM stage_users)`,
      ),
      // In user_id order: connected_sources is clustered on it, and ordered inserts are cheap ones
      // (sorted, not read through the index: see loadStagedUsers).
      applyStagedSources: db.prepare(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)})
         SELECT s.user_id, j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, j.value ->> 4
         FROM stage_users AS s, json_each(s.sources) AS j
         ORDER BY +s.user_id`,
      ),
      // Probes the covering index per warning row: costs what field_warnings holds, not what was staged.
      dropStagedUsersWarnings: db.prepare(
        `DELETE FROM field_warnings
         WHERE EXISTS (SELECT 1 FROM stage_users AS s INDEXED BY stage_users_id WHERE s.user_id = field_warnings.user_id)`,
      ),
      applyStagedWarnings: db.prepare<Bind>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at)
         SELECT s.user_id, j.value ->> 0, j.value ->> 1, @run, @now
         FROM stage_users AS s INDEXED BY stage_users_warned, json_each(s.warnings) AS j
         WHERE s.warnings <> '[]'`,
      ),
      countChanges: db.prepare<[number], { change: string; n: number }>(
        `SELECT change, count(*) AS n FROM user_changes WHERE run_id = ? GROUP BY change`,
      ),
      countSwept: db.prepare<[], number>(`SELECT count(*) FROM stage_deleted WHERE superseded = 0`).pluck(),
      markPublished: db.prepare<Bind>(
        `UPDATE sync_runs SET created = @created, updated = @updated, deleted = @deleted, superseded = @superseded,
           swept = @swept, published_at = @now
         WHERE id = @run`,
      ),

      clientIdsOf: db.prepare<[string], { user_id: string; client_user_id: string }>(
        `SELECT u.user_id, u.client_user_id FROM json_each(?) AS j JOIN users AS u ON u.user_id = j.value`,
      ),

      // --- refresh (online resolve) ---
      liveUser: db.prepare<[string], LiveState & { raw: string }>(
        `SELECT content_hash, deleted_at, raw FROM users WHERE user_id = ?`,
      ),
      parkUser: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ? AND deleted_at IS NULL`),
      holdersOfKey: db
        .prepare<[string, string, string], string>(
          `SELECT user_id FROM users WHERE team_id = ? AND client_user_id = ? AND deleted_at IS NULL AND user_id <> ?`,
        )
        .pluck(),
      softDelete: db.prepare<[string, string]>(`UPDATE users SET deleted_at = ? WHERE user_id = ?`),
      upsertUser: db.prepare<Cell[]>(
        `INSERT INTO users (${cols(USER_COLUMNS)}, first_seen_at, last_seen_at, deleted_at)
         VALUES (${marks(USER_COLUMNS.length + 2)}, NULL)
         ON CONFLICT (user_id) DO UPDATE SET ${updateFromExcluded}, last_seen_at = excluded.last_seen_at, deleted_at = NULL`,
      ),
      dropSources: db.prepare<[string]>(`DELETE FROM connected_sources WHERE user_id = ?`),
      dropWarnings: db.prepare<[string]>(`DELETE FROM field_warnings WHERE user_id = ?`),
      insertWarning: db.prepare<[string, string, string, string]>(
        `INSERT INTO field_warnings (user_id, field, problem, run_id, at) VALUES (?, ?, ?, NULL, ?)`,
      ),
      insertSource: db.prepare<Cell[]>(
        `INSERT INTO connected_sources (${cols(SOURCE_COLUMNS)}) VALUES (${marks(SOURCE_COLUMNS.length)})`,
      ),
      insertChange: db.prepare<[number | null, string, string, string]>(
        `INSERT INTO user_changes (run_id, user_id, change, at) VALUES (?, ?, ?, ?)`,
      ),
    };
  }

  /**
   * Starts a run. Any run still 'running' is left over from a process that
   * died (one writer per mirror file is assumed) and becomes 'failed' /
   * 'interrupted'. Staging left by an unfinished run on this connection is dropped.
   */
  beginRun(totalAtStart?: number): number {
    const now = this.now();
    const id = this.db
      .transaction(() => {
        this.s.interruptRuns.run({ now });
        const inserted = this.s.insertRun.run({ now, total: totalAtStart ?? null, pid: process.pid, host: hostname() });
        return Number(inserted.lastInsertRowid);
      })
      .immediate();
    this.clearStaging();
    this.run = { id, seq: 0, duplicates: 0, ledger: new RunLedger(this.activeUsers()), broken: false };
    return id;
  }

  /**
   * Stages one page of parsed records. An unchanged user costs a hash and a
   * compare in memory; only new, changed and reappearing users reach SQLite
   * (the TEMP staging tables, in one transaction). A user_id listed twice in
   * a run keeps its latest listing.
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
   * unchanged record is never parsed. Every 'write' and 'repeat-*' sighting
   * must then reach stageSighted.
   */
  sight(runId: number, userId: string, digest: string): Sighting {
    return this.openLedger(runId).ledger.sight(userId, digest);
  }

  /** Stages what `sight` asked for: the records to write, and a tombstone for a repeat that matched the mirror. */
  stageSighted(runId: number, sighted: readonly SightedRecord[]): StagePageResult {
    const { run } = this.openLedger(runId);
    let changed = 0;
    let duplicates = 0;
    for (const { sighting } of sighted) {
      if (sighting === 'write' || sighting === 'repeat-write') changed++;
      if (sighting === 'repeat-write' || sighting === 'repeat-unchanged') duplicates++;
    }
    if (changed > 0 || duplicates > 0) {
      try {
        this.db.transaction(() => {
          for (const item of sighted) {
            if (item.sighting === 'write' || item.sighting === 'repeat-write') {
              if (item.record === undefined) throw new TypeError(`stageSighted: a '${item.sighting}' sighting without its record`);
              this.stageRecord(++run.seq, item.record, item.digest);
            } else if (item.sighting === 'repeat-unchanged') this.s.stageTombstone.run(++run.seq, item.userId);
          }
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
   * Keeps a record that failed validation, for diagnosis. Written to the
   * mirror at once, not staged: it describes the run even if the run fails.
   */
  stageRejected(runId: number, rejected: RejectedRecordInput): void {
    const { run, ledger } = this.openLedger(runId);
    const userId = stringField(rejected.raw, 'user_id');
    this.db
      .transaction(() => {
        this.s.insertRejected.run({
          run: runId,
          offset: rejected.offset,
          index: rejected.index,
          userId: userId ?? null,
          clientUserId: stringField(rejected.raw, 'client_user_id') ?? null,
          reason: rejected.reason,
          raw: JSON.stringify(rejected.raw) ?? 'null',
          now: this.now(),
        });
      })
      .immediate();
    if (userId !== undefined) ledger.sightUnparsed(userId);
  }

  /** Active users not seen in this run so far: the deletion candidates. */
  countUnseenActive(runId: number): number {
    return this.openLedger(runId).ledger.unseenActiveCount;
  }

  /** Every deletion candidate's user_id: for callers that know them all gone (tests, tools). */
  listUnseenActive(runId: number): string[] {
    return [...this.unseenActiveIds(this.openLedger(runId).ledger)];
  }

  /**
   * Up to `limit` of the deletion candidates, for the sync to check upstream
   * (src/sync/deletion-check.ts). Picked at random, so that when there are
   * more than a run may check, each is reached by some later run.
   */
  pickUnseenActive(runId: number, limit: number): Array<{ user_id: string; client_user_id: string }> {
    const { ledger } = this.openLedger(runId);
    const picked = reservoirSample(this.unseenActiveIds(ledger), Math.max(0, Math.floor(limit)));
    if (picked.length === 0) return [];
    return this.s.clientIdsOf.all(JSON.stringify(picked));
  }

  /**
   * Applies the staged run in one IMMEDIATE transaction: staged users and
   * their sources, change rows, superseded holders of a key, and the
   * deletions the service confirmed. Staging is cleared in the same
   * transaction, so a publish that throws leaves mirror and staging as they were.
   */
  publish(runId: number, opts: PublishDeletions): PublishResult {
    const { run, ledger } = this.openLedger(runId);
    if (run.broken) throw new Error(`sync run ${runId}: a page failed to stage; discard the staging first`);
    const result = this.db
      .transaction((): PublishResult => {
        const state = this.s.runState.get(runId);
        if (state === undefined || state.status !== 'running' || state.published_at !== null) {
          throw new Error(`sync run ${runId} is not a running, unpublished run`);
        }
        const now = this.now();
        const at = { run: runId, now };
        this.db.exec(STAGING_INDEXES);
        if (run.duplicates > 0) this.s.dropSupersededListings.run();
        this.s.findLosers.run();
        this.s.recordStagedChanges.run(at);
        this.s.parkMovingUsers.run({ now });
        this.s.findSuperseded.run();
        for (const batch of batches(opts.deletions, BATCH)) this.s.deleteIds.run(JSON.stringify(batch));
        this.s.recordDeletions.run(at);
        this.s.applyDeletions.run({ now });
        if (this.s.isEmpty.get() === 1) {
          this.withoutSecondaryIndexes(() => {
            this.s.loadStagedUsers.run({ now });
            this.s.applyStagedSources.run();
          });
        } else {
          this.s.applyStagedUsers.run({ now });
          this.s.dropStagedUsersSources.run();
          this.s.applyStagedSources.run();
        }
        this.s.dropStagedUsersWarnings.run();
        this.s.applyStagedWarnings.run(at);

        const counts = { created: 0, updated: 0, deleted: 0 };
        for (const { change, n } of this.s.countChanges.all(runId)) {
          if (change === 'created' || change === 'updated' || change === 'deleted') counts[change] = n;
        }
        // Every deletion not confirmed upstream was a key taken over.
        const superseded = counts.deleted - (this.s.countSwept.get() ?? 0);
        this.s.markPublished.run({ ...at, ...counts, superseded, swept: opts.deletionsChecked ? 1 : 0 });
        this.clearStaging();
        return { ...counts, superseded };
      })
      .immediate();
    run.ledger = undefined;
    return result;
  }

  finishRun(runId: number, result: FinishRunInput): void {
    const run = this.run?.id === runId ? this.run : undefined;
    if (run !== undefined && result.status === 'failed') this.clearStaging();
    this.db
      .transaction(() => {
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
        // Out of the unique index first, in case this user's own key moves onto a taken one.
        this.s.parkUser.run(now, user.user_id);
        const superseded = this.s.holdersOfKey.all(user.team_id, user.client_user_id, user.user_id);
        for (const id of superseded) {
          this.s.softDelete.run(now, id);
          this.s.insertChange.run(null, id, 'deleted', now);
        }
        const row = toUserRow(user, rawJson, digest);
        this.s.upsertUser.run(...USER_COLUMNS.map((c) => row[c]), now, now);
        this.s.dropSources.run(user.user_id);
        for (const source of toSourceRows(user)) this.s.insertSource.run(...SOURCE_COLUMNS.map((c) => source[c]));
        this.s.dropWarnings.run(user.user_id);
        for (const w of record.warnings) this.s.insertWarning.run(user.user_id, w.field, w.problem, now);
        const change: RefreshChange = live === undefined || live.deleted_at !== null ? 'created' : 'updated';
        this.s.insertChange.run(null, user.user_id, change, now);
        return { change, superseded };
      })
      .immediate();
  }

  private stageRecord(seq: number, record: StagedRecord, digest: string): void {
    const row = toUserRow(record.user, record.rawJson, digest);
    const values: Cell[] = [seq];
    for (const c of USER_COLUMNS) values.push(row[c]);
    values.push(sourcesJson(toSourceRows(record.user)), warningsJson(record.warnings));
    // One array binds as the anonymous parameters, without spreading every column as an argument.
    this.s.stageUser.run(values);
  }

  /**
   * The first sync fills empty tables: dropping their secondary indexes and
   * building them again afterwards (by sorting) costs about half of keeping
   * them up to date row by row. Inside publish's transaction, so readers see
   * the indexes throughout, and a crash leaves them as they were.
   */
  private withoutSecondaryIndexes(load: () => void): void {
    const indexes = this.s.secondaryIndexes.all();
    for (const { name } of indexes) this.db.exec(`DROP INDEX main."${name.replaceAll('"', '""')}"`);
    load();
    for (const { sql } of indexes) this.db.exec(sql);
  }

  private clearStaging(): void {
    this.db.exec(
      `DELETE FROM stage_users; DELETE FROM stage_tombstones; DELETE FROM stage_losers; DELETE FROM stage_deleted;
       DROP INDEX IF EXISTS temp.stage_users_id; DROP INDEX IF EXISTS temp.stage_users_key;`,
    );
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
