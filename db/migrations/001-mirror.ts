/**
 * Migration 1: the mirror schema, the tables and views every later migration
 * builds on. Shipped: never edited (the list and its rule: db/migrations.ts).
 *
 * Every timestamp column holds `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC, milliseconds,
 * always 24 characters), the format of `Date#toISOString` and of SQLite's
 * `strftime('%Y-%m-%dT%H:%M:%fZ')`, so text comparison is time comparison.
 */
import type { Migration } from '../migrate.js';

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
