import type { Migration } from '../migrate.js';

// Placeholder: the mirror schema (users, connected_sources, sync_runs, user_changes, views) goes here.
export const mirrorSchema: Migration = { version: 1, name: 'mirror', sql: `SELECT 1;` };
