/**
 * The mirror's schema, as the list of migrations that build it, oldest first.
 * It is the contract analytics queries are written against (db/SCHEMA.md):
 * a shipped migration is never edited; a change is a new one appended at the
 * end. open.ts applies those a file has not had yet.
 *
 * Each migration is a file of its own in db/migrations/, numbered and named
 * for what it does: a new one is a new file, and a shipped one's file has no
 * reason to change again, which a diff shows at a glance.
 */
import type { Migration } from './migrate.js';
import { mirrorSchema } from './migrations/001-mirror.js';
import { memberRemovals } from './migrations/002-member-removals.js';
import { syncLease } from './migrations/003-sync-lease.js';
import { fieldWarnings } from './migrations/004-field-warnings.js';
import { verifiedDeletions } from './migrations/005-verified-deletions.js';
import { droppableUserKey } from './migrations/006-droppable-user-key.js';
import { changeFeed } from './migrations/007-change-feed.js';
import { runAnomalies } from './migrations/008-run-anomalies.js';
import { history } from './migrations/009-history.js';
import { lineage } from './migrations/010-lineage.js';
import { identityConflictIds } from './migrations/011-identity-conflicts.js';
import { schemaDrift } from './migrations/012-schema-drift.js';
import { runSource } from './migrations/013-run-source.js';

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
  lineage,
  identityConflictIds,
  schemaDrift,
  runSource,
];
