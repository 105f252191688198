// Migration 10 of the mirror's schema, in a file of its own so a shipped one is never touched again (the list: db/migrations.ts).
import type { Migration } from '../migrate.js';

/**
 * Version 10: the file's lineage (db/lineage.ts). A mirror is a system of
 * record: a copy taken by `user-mirror backup` and a copy installed by
 * `user-mirror restore` each leave a row, so the file says where it came
 * from. A `backup` row is written into the copy, never into the live
 * mirror; a `restore` row into the installed file. What a restore row
 * carries is what the change feed and history need to stay truthful
 * afterwards: the feed's cursors after the restore start above
 * `cursor_base` under a new epoch (no cursor or event id is issued twice),
 * a cursor a consumer took from the lost file (above `backup_cursor`, up to
 * `cursor_base`) gets an answer naming the restore, and history between
 * `backup_at` and the first publish after the restore is a gap ("unknown").
 */
const v10sql = /* sql */ `
CREATE TABLE mirror_lineage (
  id              INTEGER PRIMARY KEY,
  event           TEXT    NOT NULL CHECK (event IN ('backup', 'restore')),
  at              TEXT    NOT NULL,
  backup_at       TEXT    NOT NULL,
  backup_run_id   INTEGER,
  backup_cursor   INTEGER NOT NULL,
  replaced_cursor INTEGER,
  cursor_base     INTEGER,
  epoch           TEXT
) STRICT;
`;

export const lineage: Migration = { version: 10, name: 'lineage', sql: v10sql };
