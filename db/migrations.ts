/**
 * The mirror's schema, as the list of migrations that build it, oldest first.
 * It is the contract analytics queries are written against (db/SCHEMA.md):
 * a shipped migration is never edited; a change is a new one appended at the
 * end. open.ts applies those a file has not had yet.
 *
 * Migration 1, the mirror schema. Every timestamp column holds `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC, milliseconds,
 * always 24 characters), the format of `Date#toISOString` and of SQLite's
 * `strftime('%Y-%m-%dT%H:%M:%fZ')`, so text comparison is time comparison.
 */
import type { Migration } from './migrate.js';

const v1sql = /* sql */ `
CREATE TABLE sync_runs (
  id                   INTEGER PRIMARY KEY,
  started_at           TEXT    NOT NULL,
  finished_at          TEXT,
  status               TEXT    NOT NULL DEFAULT 'running'
                         CHECK (status IN ('running', 'succeeded', 'partial', 'failed')),
  total_at_start       INTEGER,
  total_at_end         INTEGER,
  pages                INTEGER NOT NULL DEFAULT 0,
  users_seen           INTEGER NOT NULL DEFAULT 0,
  created              INTEGER NOT NULL DEFAULT 0,
  updated              INTEGER NOT NULL DEFAULT 0,
  deleted              INTEGER NOT NULL DEFAULT 0,
  -- Of 'deleted': active users whose (team_id, client_user_id) a newer record took over.
  superseded           INTEGER NOT NULL DEFAULT 0,
  rejected             INTEGER NOT NULL DEFAULT 0,
  duplicates           INTEGER NOT NULL DEFAULT 0,
  rescans              INTEGER NOT NULL DEFAULT 0,
  -- 1 when this run's publish soft-deleted the users it did not see.
  swept                INTEGER NOT NULL DEFAULT 0 CHECK (swept IN (0, 1)),
  published_at         TEXT,
  sweep_skipped_reason TEXT,
  error                TEXT,
  pid                  INTEGER,
  host                 TEXT
) STRICT;
CREATE INDEX sync_runs_status ON sync_runs (status, id);

CREATE TABLE users (
  user_id                         TEXT NOT NULL PRIMARY KEY,
  team_id                         TEXT NOT NULL,
  client_user_id                  TEXT NOT NULL,
  created_on                      TEXT,
  fallback_time_zone_id           TEXT,
  fallback_time_zone_source_slug  TEXT,
  fallback_time_zone_updated_at   TEXT,
  fallback_birth_date             TEXT,
  fallback_birth_date_source_slug TEXT,
  fallback_birth_date_updated_at  TEXT,
  ingestion_start                 TEXT,
  ingestion_end                   TEXT,
  raw                             TEXT NOT NULL,
  content_hash                    TEXT NOT NULL,
  first_seen_at                   TEXT NOT NULL,
  last_seen_at                    TEXT NOT NULL,
  deleted_at                      TEXT
) STRICT;
-- Upstream reuses a client_user_id after deleting its user, so uniqueness
-- holds among active users only; deleted rows keep their history.
CREATE UNIQUE INDEX users_active_client_user ON users (team_id, client_user_id) WHERE deleted_at IS NULL;
-- Resolve by client_user_id with or without team, deleted rows included.
CREATE INDEX users_client_user_id ON users (client_user_id);
-- Covers the per-page "has this user changed?" probe, so an unchanged user
-- costs an index lookup and never reads the (large) table row.
CREATE INDEX users_content ON users (user_id, content_hash, deleted_at);

-- No foreign key to users: users are never hard-deleted, MirrorWriter writes a
-- user and its sources in one transaction, and the check costs a lookup per row.
CREATE TABLE connected_sources (
  user_id    TEXT NOT NULL,
  slug       TEXT NOT NULL,
  name       TEXT NOT NULL,
  logo       TEXT,
  created_on TEXT,
  -- Which wire descriptor the values came from: 'provider' (current) or 'source' (deprecated).
  descriptor TEXT NOT NULL CHECK (descriptor IN ('provider', 'source')),
  PRIMARY KEY (user_id, slug)
) STRICT, WITHOUT ROWID;
CREATE INDEX connected_sources_slug ON connected_sources (slug);

CREATE TABLE user_changes (
  id      INTEGER PRIMARY KEY,
  -- NULL: written by an online resolve (MirrorWriter.refreshUser), not by a sync run.
  run_id  INTEGER REFERENCES sync_runs (id),
  user_id TEXT    NOT NULL,
  change  TEXT    NOT NULL CHECK (change IN ('created', 'updated', 'deleted')),
  at      TEXT    NOT NULL
) STRICT;
CREATE INDEX user_changes_run ON user_changes (run_id, change);
CREATE INDEX user_changes_user ON user_changes (user_id, id);

CREATE TABLE rejected_records (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER NOT NULL REFERENCES sync_runs (id),
  -- 0 for the first scan pass of the run, n for the n-th re-scan after drift.
  pass         INTEGER NOT NULL DEFAULT 0,
  page_offset  INTEGER NOT NULL,
  record_index INTEGER NOT NULL,
  -- Whatever the record carried, even if malformed; NULL when absent or not a string.
  user_id        TEXT,
  client_user_id TEXT,
  reason       TEXT    NOT NULL,
  raw          TEXT    NOT NULL,
  at           TEXT    NOT NULL
) STRICT;
CREATE INDEX rejected_records_run ON rejected_records (run_id);
CREATE INDEX rejected_records_user ON rejected_records (user_id) WHERE user_id IS NOT NULL;

CREATE VIEW active_users AS
  SELECT * FROM users WHERE deleted_at IS NULL;

CREATE VIEW users_per_source AS
  SELECT cs.slug AS slug, min(cs.name) AS name, count(*) AS active_users
  FROM connected_sources AS cs
  JOIN users AS u ON u.user_id = cs.user_id AND u.deleted_at IS NULL
  GROUP BY cs.slug;

CREATE VIEW sources_per_user AS
  SELECT u.user_id AS user_id, u.team_id AS team_id, u.client_user_id AS client_user_id,
         count(cs.slug) AS source_count
  FROM users AS u
  LEFT JOIN connected_sources AS cs ON cs.user_id = u.user_id
  WHERE u.deleted_at IS NULL
  GROUP BY u.user_id;

CREATE VIEW last_sync AS
  SELECT * FROM sync_runs
  WHERE id IN (SELECT max(id) FROM sync_runs GROUP BY status);
`;

export const mirrorSchema: Migration = { version: 1, name: 'mirror', sql: v1sql };

/**
 * The audit trail of org-member removals, written by the removal worker (the
 * only writer; producers may live in services without this database).
 *
 * One `member_removals` row per BullMQ job. BullMQ ids restart when a Redis
 * is replaced, so a job is identified by its id together with its enqueue
 * time. Requests that were collapsed into a pending job by deduplication
 * leave one `member_removal_duplicates` row each, keyed by the Redis event
 * id so that several workers seeing the same event record it once;
 * `requests` on the job row is 1 + their count.
 *
 * org_id / member_id are NULL only for a job whose payload failed validation
 * (it is still audited, as failed, with the reason).
 */
export const memberRemovals: Migration = {
  version: 2,
  name: 'member-removals',
  sql: `
CREATE TABLE member_removals (
  id            INTEGER PRIMARY KEY,
  job_id        TEXT    NOT NULL,
  enqueued_at   INTEGER NOT NULL,
  org_id        TEXT,
  member_id     TEXT,
  status        TEXT    NOT NULL CHECK (status IN ('requested', 'succeeded', 'already_absent', 'failed')),
  attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  requests      INTEGER NOT NULL DEFAULT 1 CHECK (requests >= 1),
  requested_by  TEXT,
  reason        TEXT,
  last_error    TEXT,
  requested_at  TEXT    NOT NULL,
  started_at    TEXT,
  finished_at   TEXT,
  updated_at    TEXT    NOT NULL,
  UNIQUE (job_id, enqueued_at),
  CHECK (status = 'failed' OR (org_id IS NOT NULL AND member_id IS NOT NULL)),
  CHECK ((status = 'requested') = (finished_at IS NULL))
) STRICT;

CREATE INDEX member_removals_member ON member_removals (org_id, member_id);
-- Partial: operators list failures; indexing every status change would cost each job two more index updates.
CREATE INDEX member_removals_failed ON member_removals (id) WHERE status = 'failed';

CREATE TABLE member_removal_duplicates (
  event_id      TEXT    NOT NULL,
  job_id        TEXT    NOT NULL,
  dedup_id      TEXT    NOT NULL,
  seen_at       TEXT    NOT NULL,
  PRIMARY KEY (event_id, job_id)
) STRICT;

CREATE INDEX member_removal_duplicates_job ON member_removal_duplicates (job_id);
`,
};

/**
 * The sync lease (db/sync-lease.ts): at most one row, naming the process
 * that may write a sync into this file until `expires_at` (epoch ms; the
 * lease compares numbers, never text).
 */
export const syncLease: Migration = {
  version: 3,
  name: 'sync-lease',
  sql: `
CREATE TABLE sync_lease (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  holder      TEXT    NOT NULL,
  host        TEXT    NOT NULL,
  pid         INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) STRICT;
`,
};

/**
 * The field warnings of each user's stored record: the fields the parser
 * dropped (stored NULL in `users`) because they broke their rule. Holds the
 * current warnings only: whenever a user row is written, its warnings are
 * replaced. `run_id` is NULL for a row written by an online resolve.
 *
 * No foreign keys, as with connected_sources: users are never hard-deleted,
 * and the writer (db/user-writes.ts) writes a user and its warnings in one transaction.
 */
export const fieldWarnings: Migration = {
  version: 4,
  name: 'field-warnings',
  sql: `
CREATE TABLE field_warnings (
  user_id TEXT    NOT NULL,
  -- Path in the record as received: 'ingestion_start', 'connected_sources[2].provider.slug'.
  field   TEXT    NOT NULL,
  problem TEXT    NOT NULL,
  run_id  INTEGER,
  at      TEXT    NOT NULL,
  PRIMARY KEY (user_id, field)
) STRICT, WITHOUT ROWID;
`,
};

/**
 * Verified deletions (src/sync/deletions.ts): what became of the users a
 * run did not list. `swept` keeps its column and now means "this run settled
 * deletions" (checked its candidates upstream), as documented in db/SCHEMA.md.
 */
export const verifiedDeletions: Migration = {
  version: 5,
  name: 'verified-deletions',
  sql: `
ALTER TABLE sync_runs ADD COLUMN candidates        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN confirmed_gone    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN still_there       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN unverified        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN deferred          INTEGER NOT NULL DEFAULT 0;
`,
};

/**
 * `users.user_id` becomes a plain NOT NULL column with a UNIQUE index
 * (`users_user_id`) instead of the table's PRIMARY KEY. Same uniqueness, same
 * lookups, same upserts (ON CONFLICT (user_id) uses the index); what changes
 * is that the index can be dropped. A first sync into an empty mirror drops
 * it with the other secondary indexes and builds it once, sorted, before
 * COMMIT (db/first-sync-load.ts): inserting a million random UUIDs into the
 * primary key one by one was the largest single cost of a first sync
 * (measured in bench/write-layout.ts, documented in db/SCHEMA.md).
 *
 * The table is rebuilt (SQLite cannot drop a primary key in place), keeping
 * every rowid: the replica's in-memory order is by rowid. Views that read
 * `users` are dropped and created again with the same text. Measured: 1.5 s
 * for 300,000 users at the first open after the upgrade. The table's
 * columns and the views repeat migration 1's on purpose: a shipped
 * migration is never edited, so each states the schema it leaves.
 */
const v6sql = /* sql */ `
DROP VIEW active_users;
DROP VIEW users_per_source;
DROP VIEW sources_per_user;

CREATE TABLE users_v6 (
  user_id                         TEXT NOT NULL,
  team_id                         TEXT NOT NULL,
  client_user_id                  TEXT NOT NULL,
  created_on                      TEXT,
  fallback_time_zone_id           TEXT,
  fallback_time_zone_source_slug  TEXT,
  fallback_time_zone_updated_at   TEXT,
  fallback_birth_date             TEXT,
  fallback_birth_date_source_slug TEXT,
  fallback_birth_date_updated_at  TEXT,
  ingestion_start                 TEXT,
  ingestion_end                   TEXT,
  raw                             TEXT NOT NULL,
  content_hash                    TEXT NOT NULL,
  first_seen_at                   TEXT NOT NULL,
  last_seen_at                    TEXT NOT NULL,
  deleted_at                      TEXT
) STRICT;
INSERT INTO users_v6 (rowid, user_id, team_id, client_user_id, created_on, fallback_time_zone_id,
  fallback_time_zone_source_slug, fallback_time_zone_updated_at, fallback_birth_date,
  fallback_birth_date_source_slug, fallback_birth_date_updated_at, ingestion_start, ingestion_end,
  raw, content_hash, first_seen_at, last_seen_at, deleted_at)
SELECT rowid, user_id, team_id, client_user_id, created_on, fallback_time_zone_id,
  fallback_time_zone_source_slug, fallback_time_zone_updated_at, fallback_birth_date,
  fallback_birth_date_source_slug, fallback_birth_date_updated_at, ingestion_start, ingestion_end,
  raw, content_hash, first_seen_at, last_seen_at, deleted_at
FROM users ORDER BY rowid;
DROP TABLE users;
ALTER TABLE users_v6 RENAME TO users;

CREATE UNIQUE INDEX users_user_id ON users (user_id);
CREATE UNIQUE INDEX users_active_client_user ON users (team_id, client_user_id) WHERE deleted_at IS NULL;
CREATE INDEX users_client_user_id ON users (client_user_id);
CREATE INDEX users_content ON users (user_id, content_hash, deleted_at);

CREATE VIEW active_users AS
  SELECT * FROM users WHERE deleted_at IS NULL;

CREATE VIEW users_per_source AS
  SELECT cs.slug AS slug, min(cs.name) AS name, count(*) AS active_users
  FROM connected_sources AS cs
  JOIN users AS u ON u.user_id = cs.user_id AND u.deleted_at IS NULL
  GROUP BY cs.slug;

CREATE VIEW sources_per_user AS
  SELECT u.user_id AS user_id, u.team_id AS team_id, u.client_user_id AS client_user_id,
         count(cs.slug) AS source_count
  FROM users AS u
  LEFT JOIN connected_sources AS cs ON cs.user_id = u.user_id
  WHERE u.deleted_at IS NULL
  GROUP BY u.user_id;
`;

export const droppableUserKey: Migration = { version: 6, name: 'droppable-user-key', sql: v6sql };

/**
 * Version 7: the change feed (db/change-feed.ts). `user_changes.cause` says
 * why a user became inactive (a verified deletion or a superseded key
 * holder); `change_events` holds each change as the event consumers read or
 * receive, written in the transaction that publishes it; `change_feed` is
 * the feed's one row: the epoch that makes event ids unique across mirror
 * files, and the highest cursor retention has dropped (older cursors get
 * 410).
 */
const v7sql = /* sql */ `
ALTER TABLE user_changes ADD COLUMN cause TEXT;

CREATE TABLE change_events (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  type           TEXT NOT NULL,
  run_id         INTEGER,
  user_id        TEXT,
  at             TEXT NOT NULL,
  body           TEXT NOT NULL
) STRICT;
CREATE INDEX change_events_at ON change_events (at);

CREATE TABLE change_feed (
  id             INTEGER PRIMARY KEY CHECK (id = 1),
  epoch          TEXT NOT NULL,
  pruned_through INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO change_feed (id, epoch) VALUES (1, lower(hex(randomblob(4))));
`;

export const changeFeed: Migration = { version: 7, name: 'change-feed', sql: v7sql };

/**
 * Version 8: a run's anomalies, as facts on its row (src/sync/engine.ts):
 * identity conflicts within the scan (db/identity-conflicts.ts), pages that
 * carried more records than asked for, and the lowest `total` any page
 * reported (a listing that collapsed mid-scan).
 */
const v8sql = /* sql */ `
ALTER TABLE sync_runs ADD COLUMN identity_conflicts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN oversize_pages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN total_lowest INTEGER;
`;

export const runAnomalies: Migration = { version: 8, name: 'run-anomalies', sql: v8sql };

/**
 * Version 9: history (db/history.ts). `user_versions` holds one row per
 * version of a user, `source_connections` one per connection of a source to
 * a user, both written in the transaction that publishes the change, and
 * `history_state` says from when they are complete.
 *
 * An open version (`valid_to` NULL) keeps no copy of its record: it is the
 * user's `users` row; the record goes into `raw` when the version closes.
 * A first sync into an empty mirror writes no rows at all: it is the
 * baseline (`history_state.baseline_at`), and a user it loaded (`first_seen_at`
 * up to the baseline) that no run
 * has changed since has its one version and its connections implicitly,
 * from its `users` and `connected_sources` rows. The first write that
 * touches such a user makes them rows first (db/history.ts). Measured: rows
 * for every user made a first sync of 100,000 users 1.42x as long and its
 * file 42% larger. The views `user_history` and `source_history` read rows
 * and baseline as one: they are what to query.
 *
 * An existing mirror is backfilled in place, as far as its own rows allow:
 * a version for each active user, from when its last change was published
 * (the change log's run) or, when the log no longer says, from the upgrade;
 * its sources as connected since then; and every earlier version whose
 * record the change feed still holds (an event, closed by the user's next
 * event). Those rows say `backfilled = 1`. History is complete only from the
 * upgrade: `complete_since` is set to it, and an as-of question before it is
 * answered "unknown". A mirror without users gets it from its first publish.
 */
const v9sql = /* sql */ `
CREATE TABLE user_versions (
  id                INTEGER PRIMARY KEY,
  user_id           TEXT    NOT NULL,
  team_id           TEXT    NOT NULL,
  client_user_id    TEXT    NOT NULL,
  raw               TEXT,
  valid_from        TEXT    NOT NULL,
  valid_to          TEXT,
  opened_run        INTEGER,
  closed_run        INTEGER,
  end_cause         TEXT CHECK (end_cause IN ('updated', 'verified', 'superseded')),
  ended_in_deletion INTEGER GENERATED ALWAYS AS (end_cause IN ('verified', 'superseded')) VIRTUAL,
  backfilled        INTEGER NOT NULL DEFAULT 0 CHECK (backfilled IN (0, 1))
) STRICT;
CREATE UNIQUE INDEX user_versions_open ON user_versions (user_id) WHERE valid_to IS NULL;
CREATE INDEX user_versions_user ON user_versions (user_id, valid_from);
CREATE INDEX user_versions_client ON user_versions (client_user_id, valid_from);
CREATE INDEX user_versions_closed ON user_versions (valid_to) WHERE valid_to IS NOT NULL;

CREATE TABLE source_connections (
  id              INTEGER PRIMARY KEY,
  user_id         TEXT    NOT NULL,
  slug            TEXT    NOT NULL,
  created_on      TEXT,
  connected_at    TEXT    NOT NULL,
  disconnected_at TEXT,
  opened_run      INTEGER,
  closed_run      INTEGER,
  ended_by        TEXT CHECK (ended_by IN ('disconnected', 'user_deleted')),
  backfilled      INTEGER NOT NULL DEFAULT 0 CHECK (backfilled IN (0, 1))
) STRICT;
CREATE UNIQUE INDEX source_connections_open ON source_connections (user_id, slug) WHERE disconnected_at IS NULL;
CREATE INDEX source_connections_user ON source_connections (user_id, connected_at);
CREATE INDEX source_connections_slug ON source_connections (slug, connected_at);
CREATE INDEX source_connections_closed ON source_connections (disconnected_at) WHERE disconnected_at IS NOT NULL;

CREATE TABLE history_state (
  id             INTEGER PRIMARY KEY CHECK (id = 1),
  complete_since TEXT,
  baseline_at    TEXT,
  baseline_run   INTEGER
) STRICT;
INSERT INTO history_state (id, complete_since)
  VALUES (1, CASE WHEN EXISTS (SELECT 1 FROM users) THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END);

CREATE VIEW user_history AS
SELECT v.id, v.user_id, v.team_id, v.client_user_id, coalesce(v.raw, u.raw) AS raw, v.valid_from, v.valid_to,
       v.opened_run, v.closed_run, v.end_cause, v.ended_in_deletion, v.backfilled
FROM user_versions AS v LEFT JOIN users AS u ON v.raw IS NULL AND u.user_id = v.user_id
UNION ALL
SELECT NULL, u.user_id, u.team_id, u.client_user_id, u.raw, h.baseline_at, NULL,
       h.baseline_run, NULL, NULL, NULL, 0
FROM history_state AS h JOIN users AS u ON h.baseline_at IS NOT NULL AND u.first_seen_at <= h.baseline_at AND u.deleted_at IS NULL
WHERE NOT EXISTS (SELECT 1 FROM user_versions AS x WHERE x.user_id = u.user_id);

CREATE VIEW source_history AS
SELECT s.id, s.user_id, s.slug, s.created_on, s.connected_at, s.disconnected_at, s.opened_run, s.closed_run, s.ended_by, s.backfilled
FROM source_connections AS s
UNION ALL
SELECT NULL, c.user_id, c.slug, c.created_on, h.baseline_at, NULL, h.baseline_run, NULL, NULL, 0
FROM history_state AS h JOIN connected_sources AS c ON h.baseline_at IS NOT NULL
JOIN users AS u ON u.user_id = c.user_id AND u.first_seen_at <= h.baseline_at AND u.deleted_at IS NULL
WHERE NOT EXISTS (SELECT 1 FROM user_versions AS x WHERE x.user_id = c.user_id);

INSERT INTO user_versions (user_id, team_id, client_user_id, valid_from, opened_run, backfilled)
SELECT u.user_id, u.team_id, u.client_user_id,
       coalesce(last.published, (SELECT complete_since FROM history_state)), last.run_id, 1
FROM users AS u
LEFT JOIN (SELECT c.user_id, c.run_id, coalesce(r.published_at, c.at) AS published,
                  row_number() OVER (PARTITION BY c.user_id ORDER BY c.id DESC) AS rank
           FROM user_changes AS c LEFT JOIN sync_runs AS r ON r.id = c.run_id) AS last
  ON last.user_id = u.user_id AND last.rank = 1
WHERE u.deleted_at IS NULL
ORDER BY u.user_id;

INSERT INTO source_connections (user_id, slug, created_on, connected_at, opened_run, backfilled)
SELECT s.user_id, s.slug, s.created_on, v.valid_from, v.opened_run, 1
FROM connected_sources AS s JOIN user_versions AS v ON v.user_id = s.user_id AND v.valid_to IS NULL
ORDER BY s.user_id, s.slug;

INSERT INTO user_versions (user_id, team_id, client_user_id, raw, valid_from, valid_to, opened_run, closed_run, end_cause, backfilled)
SELECT e.user_id, e.body ->> '$.data.team_id', e.body ->> '$.data.client_user_id', e.body -> '$.data.user',
       e.at, n.at, e.run_id, n.run_id,
       CASE n.type WHEN 'user.deleted' THEN coalesce(n.body ->> '$.data.reason', 'verified') ELSE 'updated' END, 1
FROM (SELECT id, user_id, type, run_id, at, body, lead(id) OVER (PARTITION BY user_id ORDER BY id) AS next_id
      FROM change_events WHERE user_id IS NOT NULL) AS e
JOIN change_events AS n ON n.id = e.next_id
WHERE e.type IN ('user.created', 'user.updated', 'user.restored')
  AND e.body ->> '$.data.client_user_id' IS NOT NULL AND e.body ->> '$.data.team_id' IS NOT NULL
ORDER BY e.id;
`;

export const history: Migration = { version: 9, name: 'history', sql: v9sql };

/** Every migration, in order. Append; never edit one that has shipped. */
export const MIGRATIONS: readonly Migration[] = [
  mirrorSchema,
  memberRemovals,
  syncLease,
  fieldWarnings,
  verifiedDeletions,
  droppableUserKey,
  changeFeed,
  runAnomalies,
  history,
];
