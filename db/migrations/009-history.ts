// Migration 9 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

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
