/**
 * Reads the mirror: users by client_user_id, and the state of sync runs.
 * Works on a readonly connection; statements are prepared once per reader,
 * so a long-lived reader pays only for the lookup itself.
 */
import { z } from 'zod';
import type { Db } from './open.js';
import { hasTable } from './has-table.js';
import type { MirroredUser } from './mirrored-user.js';

export interface LookupOptions {
  /** Also return a user that is deleted upstream (soft-deleted in the mirror). */
  includeDeleted?: boolean;
  /** Restrict to one team; without it, any team's user with that client_user_id. */
  teamId?: string;
  /**
   * Parse the stored record again, as the sync does, with the reader's
   * record check: fields that break their rule are dropped (they are listed
   * in field_warnings). Off by default: the
   * record is returned as received, which is what `resolve` prints, and
   * re-parsing costs more than the lookup itself.
   */
  validate?: boolean;
}

/** A user as the mirror holds it: the service's record plus what the mirror knows about it. */
export interface MirrorEntry<U = MirroredUser> {
  /** The record parsed from `raw`, on first access: a lookup that only forwards `raw` never pays for it. */
  readonly user: U;
  /** The record exactly as stored (`users.raw`): JSON text as the service sent it. */
  raw: string;
  deletedAt: string | null;
  firstSeenAt: string;
  lastSeenAt: string;
}

const SyncRunRowSchema = z.object({
  id: z.number().int(),
  started_at: z.string(),
  finished_at: z.string().nullable(),
  status: z.enum(['running', 'succeeded', 'partial', 'failed']),
  total_at_start: z.number().int().nullable(),
  total_at_end: z.number().int().nullable(),
  pages: z.number().int(),
  users_seen: z.number().int(),
  created: z.number().int(),
  updated: z.number().int(),
  deleted: z.number().int(),
  superseded: z.number().int(),
  rejected: z.number().int(),
  duplicates: z.number().int(),
  candidates: z.number().int(),
  confirmed_gone: z.number().int(),
  still_there: z.number().int(),
  unverified: z.number().int(),
  deferred: z.number().int(),
  swept: z.number().int(),
  published_at: z.string().nullable(),
  sweep_skipped_reason: z.string().nullable(),
  error: z.string().nullable(),
  // Migration 8; a reader of a mirror its writer has not yet migrated reads them as none.
  identity_conflicts: z.number().int().default(0),
  oversize_pages: z.number().int().default(0),
  total_lowest: z.number().int().nullable().default(null),
  // Migration 13: the leader a follower's run read (db/run-source.ts); null on a mirror that reads the service.
  source_run_id: z.number().int().nullable().default(null),
  source_at: z.string().nullable().default(null),
  source_epoch: z.string().nullable().default(null),
});

const SyncRunSchema = SyncRunRowSchema.transform((r) => ({
  id: r.id,
  startedAt: r.started_at,
  finishedAt: r.finished_at,
  status: r.status,
  totalAtStart: r.total_at_start,
  totalAtEnd: r.total_at_end,
  pages: r.pages,
  usersSeen: r.users_seen,
  created: r.created,
  updated: r.updated,
  deleted: r.deleted,
  superseded: r.superseded,
  rejected: r.rejected,
  duplicates: r.duplicates,
  candidates: {
    candidates: r.candidates,
    confirmedGone: r.confirmed_gone,
    stillThere: r.still_there,
    unverified: r.unverified,
    deferred: r.deferred,
  },
  swept: r.swept === 1,
  publishedAt: r.published_at,
  sweepSkippedReason: r.sweep_skipped_reason,
  error: r.error,
  anomalies: { identityConflicts: r.identity_conflicts, oversizePages: r.oversize_pages, totalLowest: r.total_lowest },
  source: r.source_at === null ? null : { runId: r.source_run_id, at: r.source_at, epoch: r.source_epoch },
}));
export type SyncRun = z.output<typeof SyncRunSchema>;

export interface MirrorStats extends RunHistory {
  activeUsers: number;
  deletedUsers: number;
}

export interface RunHistory {
  lastRun: SyncRun | undefined;
  lastSucceededRun: SyncRun | undefined;
  /** The newest failed or partial run: why the mirror may be behind. */
  lastProblemRun: SyncRun | undefined;
}

/** What field_warnings says about the active users. */
export interface FieldWarningStats {
  /** Active users whose stored record has at least one field warning. */
  users: number;
  /** Per field path as stored (list indices included): active users warned about it. */
  byField: Array<{ field: string; users: number }>;
}

interface EntryRow {
  raw: string;
  deleted_at: string | null;
  first_seen_at: string;
  last_seen_at: string;
}

/** The run columns this file has: a read-only open never migrates, so a newer reader may meet an older file. */
function runColumns(db: Db): string {
  const present = new Set(db.prepare<[], string>(`SELECT name FROM pragma_table_info('sync_runs')`).pluck().all());
  return Object.keys(SyncRunRowSchema.shape)
    .filter((c) => present.has(c))
    .join(', ');
}

/**
 * Of one client_user_id's rows, "the user with this id" over time: the
 * active one, else the most recently deleted (then the most recently seen).
 * Chosen here rather than by an ORDER BY: a client_user_id has a row or a
 * few, and SQLite's sorter costs ~8 µs a statement with better-sqlite3 13
 * (bench:resolve's --include-deleted rows went 0.4× with the sort in SQL).
 * The timestamps are ISO 8601 in one format, so text order is time order.
 */
export function latestEntry<R extends Pick<EntryRow, 'deleted_at' | 'last_seen_at'>>(rows: readonly R[]): R | undefined {
  let best: R | undefined;
  for (const row of rows) {
    if (best === undefined || laterEntry(row, best)) best = row;
  }
  return best;
}

function laterEntry(a: Pick<EntryRow, 'deleted_at' | 'last_seen_at'>, b: Pick<EntryRow, 'deleted_at' | 'last_seen_at'>): boolean {
  if ((a.deleted_at === null) !== (b.deleted_at === null)) return a.deleted_at === null;
  if (a.deleted_at !== b.deleted_at) return (a.deleted_at ?? '') > (b.deleted_at ?? '');
  return a.last_seen_at > b.last_seen_at;
}

/** The schema version this reader understands; older files have not been migrated (or synced) yet. */
const SCHEMA_VERSION = 1;

export class MirrorNotReadyError extends Error {
  override name = 'MirrorNotReadyError';
}

/**
 * Checks a stored record the way the sync parses one, and returns the parsed
 * form or throws saying why not. The caller's: db/ stores records, the
 * service's schema lives above it (src/replica/resolve.ts passes parseUser's).
 */
export type RecordCheck<U> = (record: unknown) => U;

/** The client user id of the active user with the lowest id, or undefined for an empty mirror: an example to look up. */
export function firstActiveClientUserId(db: Db): string | undefined {
  return db.prepare<[], string>('SELECT client_user_id FROM active_users ORDER BY user_id LIMIT 1').pluck().get();
}

export class MirrorReader<U = MirroredUser> {
  private readonly s;

  constructor(
    private readonly db: Db,
    private readonly check?: RecordCheck<U>,
  ) {
    const version = db.pragma('user_version', { simple: true });
    if (typeof version !== 'number' || version < SCHEMA_VERSION) {
      throw new MirrorNotReadyError(`${db.name} holds no mirror yet (schema version ${String(version)}); run a sync first`);
    }
    // An active user is unique per (team_id, client_user_id), so the active lookups need no sort
    // (a sort costs a fifth of a lookup); across teams, the first in index order is returned.
    // With deleted ones: every row of the id, and latestEntry picks.
    const entry = (where: string, limit = 'LIMIT 1') =>
      db.prepare<unknown[], EntryRow>(
        `SELECT raw, deleted_at, first_seen_at, last_seen_at FROM users INDEXED BY users_client_user_id
         WHERE client_user_id = ? ${where} ${limit}`,
      );
    const rawOnly = (where: string) =>
      db
        .prepare<unknown[], string>(`SELECT raw FROM users INDEXED BY users_client_user_id WHERE client_user_id = ? ${where} LIMIT 1`)
        .pluck();
    const runCols = runColumns(db);
    this.s = {
      active: entry('AND deleted_at IS NULL'),
      activeInTeam: entry('AND deleted_at IS NULL AND team_id = ?'),
      any: entry('', ''),
      anyInTeam: entry('AND team_id = ?', ''),
      activeRaw: rawOnly('AND deleted_at IS NULL'),
      activeRawInTeam: rawOnly('AND deleted_at IS NULL AND team_id = ?'),
      counts: db.prepare<[], { active: number; deleted: number }>(
        `SELECT (SELECT count(*) FROM users WHERE deleted_at IS NULL) AS active,
                (SELECT count(*) FROM users WHERE deleted_at IS NOT NULL) AS deleted`,
      ),
      lastRun: db.prepare<[], unknown>(`SELECT ${runCols} FROM sync_runs ORDER BY id DESC LIMIT 1`),
      lastSucceeded: db.prepare<[], unknown>(`SELECT ${runCols} FROM sync_runs WHERE status = 'succeeded' ORDER BY id DESC LIMIT 1`),
      lastProblem: db.prepare<[], unknown>(
        `SELECT ${runCols} FROM sync_runs WHERE status IN ('failed', 'partial') ORDER BY id DESC LIMIT 1`,
      ),
      lastRuns: db.prepare<[number], unknown>(`SELECT ${runCols} FROM sync_runs ORDER BY id DESC LIMIT ?`),
    };
  }

  /** The user's record as last received, or undefined. */
  byClientUserId(clientUserId: string, options: LookupOptions = {}): U | undefined {
    if (options.includeDeleted === true) return this.lookup(clientUserId, options)?.user;
    const raw =
      options.teamId === undefined ? this.s.activeRaw.get(clientUserId) : this.s.activeRawInTeam.get(clientUserId, options.teamId);
    return raw === undefined ? undefined : this.decode(raw, options.validate ?? false);
  }

  lookup(clientUserId: string, options: LookupOptions = {}): MirrorEntry<U> | undefined {
    const { includeDeleted = false, teamId } = options;
    const row = includeDeleted
      ? latestEntry(teamId === undefined ? this.s.any.all(clientUserId) : this.s.anyInTeam.all(clientUserId, teamId))
      : teamId === undefined
        ? this.s.active.get(clientUserId)
        : this.s.activeInTeam.get(clientUserId, teamId);
    if (row === undefined) return undefined;
    // Validation reports a bad stored record at lookup time, where the caller asked for it.
    const user = options.validate === true ? this.decode(row.raw, true) : undefined;
    return new StoredEntry(row, user, (raw) => this.decode(raw, false));
  }

  /**
   * `raw` is the record exactly as the service sent it, written only by
   * sync (db/user-writes.ts) after its identity passed: trusting it by default is what
   * keeps a lookup in the microseconds. Its other fields may break their rule
   * (see field_warnings); `validate` returns the parsed form without them.
   */
  private decode(raw: string, validate: boolean): U {
    const parsed: unknown = JSON.parse(raw);
    if (!validate) return parsed as U;
    if (this.check === undefined) throw new Error('this mirror reader was opened without a record check; validate needs one');
    return this.check(parsed);
  }

  /**
   * Many lookups in one read transaction: every answer comes from the same
   * snapshot, even while a sync publishes. Ids not found are absent from the map.
   */
  lookupMany(clientUserIds: Iterable<string>, options: LookupOptions = {}): Map<string, MirrorEntry<U>> {
    return this.db.transaction(() => {
      const found = new Map<string, MirrorEntry<U>>();
      for (const id of clientUserIds) {
        const entry = this.lookup(id, options);
        if (entry !== undefined) found.set(id, entry);
      }
      return found;
    })();
  }

  stats(): MirrorStats {
    const counts = this.s.counts.get() ?? { active: 0, deleted: 0 };
    return { activeUsers: counts.active, deletedUsers: counts.deleted, ...this.runHistory() };
  }

  /** The runs that tell how fresh the mirror is: three indexed lookups, no count of users. */
  runHistory(): RunHistory {
    return {
      lastRun: parseRun(this.s.lastRun.get()),
      lastSucceededRun: parseRun(this.s.lastSucceeded.get()),
      lastProblemRun: parseRun(this.s.lastProblem.get()),
    };
  }

  /**
   * Undefined for a mirror from before migration 4: a readonly reader
   * cannot migrate it, and the next sync will.
   */
  fieldWarningStats(): FieldWarningStats | undefined {
    if (!hasTable(this.db, 'field_warnings')) return undefined;
    const active = `FROM field_warnings AS w JOIN users AS u ON u.user_id = w.user_id WHERE u.deleted_at IS NULL`;
    const users = this.db.prepare<[], number>(`SELECT count(DISTINCT w.user_id) ${active}`).pluck().get() ?? 0;
    const byField = this.db
      .prepare<[], { field: string; users: number }>(`SELECT w.field AS field, count(*) AS users ${active} GROUP BY w.field`)
      .all();
    return { users, byField };
  }

  /** The latest `n` runs, newest first. */
  lastRuns(n: number): SyncRun[] {
    return this.s.lastRuns.all(Math.max(0, Math.floor(n))).map((r) => SyncRunSchema.parse(r));
  }
}

function parseRun(row: unknown): SyncRun | undefined {
  return row === undefined ? undefined : SyncRunSchema.parse(row);
}

/** A lookup's answer; parses the stored text only when `user` is read. */
class StoredEntry<U> implements MirrorEntry<U> {
  readonly raw: string;
  readonly deletedAt: string | null;
  readonly firstSeenAt: string;
  readonly lastSeenAt: string;
  private parsed: U | undefined;

  constructor(
    row: EntryRow,
    parsed: U | undefined,
    private readonly decode: (raw: string) => U,
  ) {
    this.raw = row.raw;
    this.deletedAt = row.deleted_at;
    this.firstSeenAt = row.first_seen_at;
    this.lastSeenAt = row.last_seen_at;
    this.parsed = parsed;
  }

  get user(): U {
    this.parsed ??= this.decode(this.raw);
    return this.parsed;
  }

  /** As a plain object (JSON.stringify, test equality), with the user parsed. */
  toJSON(): { user: U; raw: string; deletedAt: string | null; firstSeenAt: string; lastSeenAt: string } {
    return { user: this.user, raw: this.raw, deletedAt: this.deletedAt, firstSeenAt: this.firstSeenAt, lastSeenAt: this.lastSeenAt };
  }
}
