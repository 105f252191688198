/**
 * Opens the member-removal audit (AUDIT_DB): a SQLite file of its own, next
 * to the mirror by default (`./data/mirror.db` -> `./data/mirror-audit.db`).
 *
 * Why not inside the mirror file, as before: SQLite has one write lock per
 * file, and a sync's publish holds the mirror's for as long as it takes
 * (12-29 s for 300k users). An audit write behind it either failed
 * (`database is locked`: the row stayed `requested` although the member was
 * gone) or, with a longer busy timeout, would stall the event loop of the
 * process writing it, because better-sqlite3 waits synchronously. In a file
 * of its own the audit shares its lock only with other removal workers,
 * whose transactions last milliseconds.
 *
 * The busy timeout is short for the same reason: a removal worker writes the
 * audit on its event loop. A longer wait is retried asynchronously, with
 * backoff, by the audit writer (removal-audit.ts).
 *
 * Rows an older version wrote into the mirror's `member_removals` are copied
 * over once, when the audit file is first opened for writing (see
 * `legacy_audit_import`); the mirror keeps its copy, no longer written.
 */
import { existsSync } from 'node:fs';
import { MirrorDbError, openMirror, type Db } from './open.js';
import { hasTable } from './has-table.js';
import type { Migration } from './migrate.js';
import { memberRemovals } from './migrations/002-member-removals.js';
import { auditPathOf, samePath } from './audit-location.js';

export const AUDIT_BUSY_TIMEOUT_MS = 250;

export interface OpenAuditOptions {
  /** For `status` and `removals`: no migration, no import, the file must exist. */
  readonly?: boolean;
  /** The mirror file an older version kept the audit in; its rows are copied once. */
  legacyMirror?: string;
}

export function openAudit(path: string, options: OpenAuditOptions = {}): Db {
  const db = openMirror(path, {
    readonly: options.readonly,
    busyTimeoutMs: AUDIT_BUSY_TIMEOUT_MS,
    migrations: AUDIT_MIGRATIONS,
    variable: 'AUDIT_DB',
  });
  if (options.readonly !== true && options.legacyMirror !== undefined) {
    try {
      importLegacyAudit(db, options.legacyMirror);
    } catch (err) {
      db.close();
      throw err;
    }
  }
  return db;
}

interface LegacyImport {
  source: string | null;
  removals: number;
  duplicates: number;
}

const REMOVAL_COLUMNS = [
  'id',
  'job_id',
  'enqueued_at',
  'org_id',
  'member_id',
  'status',
  'attempts',
  'requests',
  'requested_by',
  'reason',
  'last_error',
  'requested_at',
  'started_at',
  'finished_at',
  'updated_at',
] as const;
const DUPLICATE_COLUMNS = ['event_id', 'job_id', 'dedup_id', 'seen_at'] as const;

/**
 * Copies the mirror's audit rows into `db` unless that was done before; returns what was copied, or undefined.
 *
 * The mirror is read through a readonly connection of its own, not ATTACHed: BEGIN IMMEDIATE takes the
 * write lock of every attached file, and a sync holds the mirror's for its whole run. A second daemon
 * starting beside a running sync then failed with `database is locked` after the audit's 250 ms wait.
 */
function importLegacyAudit(db: Db, mirrorPath: string, now: Date = new Date()): LegacyImport | undefined {
  if (done(db)) return undefined;
  const source = mirrorPath !== ':memory:' && existsSync(mirrorPath) && !samePath(mirrorPath, db.name) ? mirrorPath : null;
  const legacy = source === null ? undefined : openMirror(source, { readonly: true });
  try {
    return db
      .transaction((): LegacyImport | undefined => {
        if (done(db)) return undefined;
        const copy = legacy !== undefined && hasTable(legacy, 'member_removals');
        const removals = copy ? copyRows(legacy, db, 'member_removals', REMOVAL_COLUMNS, 'ORDER BY id') : 0;
        const duplicates = copy ? copyRows(legacy, db, 'member_removal_duplicates', DUPLICATE_COLUMNS, '') : 0;
        db.prepare('INSERT INTO legacy_audit_import (id, source, removals, duplicates, imported_at) VALUES (1, ?, ?, ?, ?)').run(
          copy ? source : null,
          removals,
          duplicates,
          now.toISOString(),
        );
        return { source: copy ? source : null, removals, duplicates };
      })
      .immediate();
  } finally {
    legacy?.close();
  }
}

/** Rows of `table` from one connection into the same table of another; rows already there are kept. */
function copyRows(from: Db, to: Db, table: string, columns: readonly string[], order: string): number {
  const list = columns.join(', ');
  const insert = to.prepare(`INSERT OR IGNORE INTO main.${table} (${list}) VALUES (${columns.map(() => '?').join(', ')})`);
  let copied = 0;
  for (const row of from.prepare(`SELECT ${list} FROM ${table} ${order}`).raw().iterate() as Iterable<unknown[]>) {
    copied += insert.run(...row).changes;
  }
  return copied;
}

function done(db: Db): boolean {
  return db.prepare('SELECT 1 FROM legacy_audit_import WHERE id = 1').get() !== undefined;
}

/**
 * Audit migration 1: the removal audit in a file of its own (AUDIT_DB). The
 * tables are those of mirror migration 2, which stays in the mirror's set
 * (a shipped migration is never edited) but is no longer written there.
 *
 * `legacy_audit_import` records the one copy of the rows an older version
 * wrote into the mirror file (db/open-audit.ts): one row, written in the same
 * transaction as the copy, so the copy happens exactly once.
 */
const auditSchema: Migration = {
  version: 1,
  name: 'member-removals',
  sql: `${memberRemovals.sql}
CREATE TABLE legacy_audit_import (
  id           INTEGER PRIMARY KEY CHECK (id = 1),
  -- The mirror file rows were copied from; NULL when there was none to copy.
  source       TEXT,
  removals     INTEGER NOT NULL,
  duplicates   INTEGER NOT NULL,
  imported_at  TEXT    NOT NULL
) STRICT;
`,
};

/**
 * Audit migration 2: which management service a row is about. `target` is
 * the target of the worker that handled the job (jobs/url-target.ts: 16
 * hex digits of SHA-256 over its canonical MANAGEMENT_URL): where its DELETE
 * went, or would have gone for a job it refused. NULL for rows written
 * before removals named their target.
 */
const removalTarget: Migration = {
  version: 2,
  name: 'removal-target',
  sql: `ALTER TABLE member_removals ADD COLUMN target TEXT;`,
};

/** The audit file's migrations (AUDIT_DB), numbered on their own. Append; never edit one that has shipped. */
export const AUDIT_MIGRATIONS: readonly Migration[] = [auditSchema, removalTarget];

/**
 * Where the removal audit lives: AUDIT_DB, or next to MIRROR_DB
 * (db/audit-location.ts). Naming the mirror file itself is a configuration
 * error, which a command's configuration pass reports with its other
 * problems (src/runtime/audit-location-check.ts); here it throws for callers
 * without one.
 */
export function auditLocation(settings: { MIRROR_DB: string; AUDIT_DB?: string | undefined }): string {
  const { path, problem } = auditPathOf(settings);
  if (problem !== undefined) throw new MirrorDbError(path, problem, 'AUDIT_DB');
  return path;
}
