// Migration 7 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

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
