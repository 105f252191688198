import type { Migration } from '../migrate.js';

// Placeholder: the member_removals audit table goes here.
export const memberRemovals: Migration = { version: 2, name: 'member-removals', sql: `SELECT 1;` };
