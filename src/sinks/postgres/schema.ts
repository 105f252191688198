/**
 * The destination's tables in PostgreSQL, one schema per mirror, and their
 * version. The schema is created (and later migrated) by the writer role
 * that owns it; `sink_position.schema_version` says which layout it has,
 * and a build that finds a newer one than it knows refuses to touch it, as
 * the mirror itself does (db/migrate.ts): an older daemon must not write
 * rows a newer layout would misread.
 *
 * Tables (docs/postgres.md explains each column):
 * - `users`: one row per user the mirror holds, typed columns, `raw` jsonb;
 * - `sources`: the connected sources of each user (deleted users' kept, as the mirror does);
 * - `versions`: SCD2, one row per version of a user, `valid_from`/`valid_to`, keyed by `user_id` alone;
 *   an open version's `raw` is NULL, its record the `users` row's (as in the mirror: no second copy of
 *   every record), filled in when it closes; the view `user_history` shows every version with its record;
 * - `source_history`: one row per connection of a source to a user;
 * - `sink_position`: one row: the feed cursor and epoch applied, the schema version, the field policy.
 * The indexes are listed apart (INDEXES) so that a baseline can drop them,
 * load by COPY and build them once, inside its one transaction.
 */
import pg from 'pg';

/** The layout this build writes. Bump with a migration in MIGRATIONS. */
const SCHEMA_VERSION = 1;

/** The migration to version n at index n - 2 (version 1 is createTables itself). */
const MIGRATIONS: readonly ((schema: string) => string)[] = [];

class DestinationSchemaTooNewError extends Error {
  constructor(schema: string, found: number) {
    super(
      `PostgreSQL schema ${schema} has destination layout ${found}; this build knows up to ${SCHEMA_VERSION}: upgrade user-mirror (it never writes a newer layout)`,
    );
    this.name = 'DestinationSchemaTooNewError';
  }
}

export const q = (name: string): string => pg.escapeIdentifier(name);

function createTables(s: string): string {
  return `
CREATE TABLE ${s}.sink_position (
  id integer PRIMARY KEY CHECK (id = 1),
  schema_version integer NOT NULL,
  epoch text,
  cursor bigint,
  field_policy text,
  complete_since timestamptz,
  baseline_at timestamptz,
  applied_at timestamptz
);
CREATE TABLE ${s}.users (
  user_id uuid NOT NULL,
  team_id uuid,
  client_user_id text,
  created_on timestamptz,
  fallback_time_zone_id text,
  fallback_time_zone_source_slug text,
  fallback_time_zone_updated_at timestamptz,
  fallback_birth_date date,
  fallback_birth_date_source_slug text,
  fallback_birth_date_updated_at timestamptz,
  ingestion_start date,
  ingestion_end date,
  raw jsonb NOT NULL,
  deleted_at timestamptz
);
CREATE TABLE ${s}.sources (
  user_id uuid NOT NULL,
  slug text NOT NULL,
  name text,
  logo text,
  created_on timestamptz,
  descriptor text
);
CREATE TABLE ${s}.versions (
  user_id uuid NOT NULL,
  team_id uuid,
  client_user_id text,
  raw jsonb,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  end_cause text
);
CREATE TABLE ${s}.source_history (
  user_id uuid NOT NULL,
  slug text NOT NULL,
  created_on timestamptz,
  connected_at timestamptz NOT NULL,
  disconnected_at timestamptz,
  ended_by text
);
CREATE VIEW ${s}.active_users AS SELECT * FROM ${s}.users WHERE deleted_at IS NULL;
CREATE VIEW ${s}.user_history AS
SELECT v.user_id, v.team_id, v.client_user_id, coalesce(v.raw, u.raw) AS raw, v.valid_from, v.valid_to, v.end_cause
FROM ${s}.versions AS v LEFT JOIN ${s}.users AS u ON v.raw IS NULL AND u.user_id = v.user_id;
CREATE VIEW ${s}.history_state AS SELECT complete_since FROM ${s}.sink_position WHERE id = 1;
INSERT INTO ${s}.sink_position (id, schema_version) VALUES (1, ${SCHEMA_VERSION});`;
}

/** Each index (or key) of the loaded tables: how to build it and how to drop it. */
export interface IndexSpec {
  create(s: string): string;
  drop(s: string): string;
}

const key = (table: string, name: string, cols: string): IndexSpec => ({
  create: (s) => `ALTER TABLE ${s}.${table} ADD CONSTRAINT ${name} PRIMARY KEY (${cols})`,
  drop: (s) => `ALTER TABLE ${s}.${table} DROP CONSTRAINT IF EXISTS ${name}`,
});
const index = (name: string, on: string): IndexSpec => ({
  create: (s) => `CREATE ${on.startsWith('UNIQUE ') ? 'UNIQUE ' : ''}INDEX ${name} ON ${s}.${on.replace(/^UNIQUE /, '')}`,
  drop: (s) => `DROP INDEX IF EXISTS ${s}.${name}`,
});

export const INDEXES: readonly IndexSpec[] = [
  key('users', 'users_pkey', 'user_id'),
  index('users_client_user_id', 'users (client_user_id)'),
  key('sources', 'sources_pkey', 'user_id, slug'),
  index('sources_slug', 'sources (slug)'),
  // One open version per user: the SCD2 key is user_id alone, so a close can never retire another user's row.
  index('versions_open', 'UNIQUE versions (user_id) WHERE valid_to IS NULL'),
  index('versions_user', 'versions (user_id, valid_from)'),
  index('versions_client_user_id', 'versions (client_user_id, valid_from)'),
  index('source_history_open', 'UNIQUE source_history (user_id, slug) WHERE disconnected_at IS NULL'),
  index('source_history_user', 'source_history (user_id, connected_at)'),
  index('source_history_slug', 'source_history (slug, connected_at)'),
];

/** The loaded tables, in load order. */
export const TABLES = ['users', 'sources', 'versions', 'source_history'] as const;
export type TableName = (typeof TABLES)[number];

/**
 * Creates the schema's tables if absent, migrates an older layout, and
 * refuses a newer one; in one transaction, serialized with any other
 * writer of the same schema by an advisory lock. Returns the version found
 * (0: created now).
 */
export async function prepareSchema(client: pg.ClientBase, schema: string): Promise<number> {
  const s = q(schema);
  await client.query('BEGIN');
  try {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`user-mirror sink ${schema}`]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    const exists = await client.query<{ t: string | null }>(`SELECT to_regclass($1) AS t`, [`${s}.sink_position`]);
    let found = 0;
    if (exists.rows[0]?.t == null) {
      await client.query(createTables(s));
      for (const i of INDEXES) await client.query(i.create(s));
    } else {
      const row = await client.query<{ schema_version: number }>(`SELECT schema_version FROM ${s}.sink_position WHERE id = 1`);
      found = row.rows[0]?.schema_version ?? 0;
      if (found > SCHEMA_VERSION) throw new DestinationSchemaTooNewError(schema, found);
      for (let v = found + 1; v <= SCHEMA_VERSION; v++) {
        const migration = MIGRATIONS[v - 2];
        if (migration !== undefined) await client.query(migration(s));
      }
      if (found < SCHEMA_VERSION) await client.query(`UPDATE ${s}.sink_position SET schema_version = $1 WHERE id = 1`, [SCHEMA_VERSION]);
    }
    await client.query('COMMIT');
    return found;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
