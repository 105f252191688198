// Migration 6 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

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
