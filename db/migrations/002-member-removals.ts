// Migration 2 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

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
