/** Every migration, in order. Append; never edit one that has shipped. */
import type { Migration } from '../migrate.js';
import { mirrorSchema } from './001-mirror.js';
import { memberRemovals } from './002-member-removals.js';
import { syncLease } from './003-sync-lease.js';
import { fieldWarnings } from './004-field-warnings.js';
import { verifiedDeletions } from './005-verified-deletions.js';
import { droppableUserKey } from './006-droppable-user-key.js';

export const MIGRATIONS: readonly Migration[] = [mirrorSchema, memberRemovals, syncLease, fieldWarnings, verifiedDeletions, droppableUserKey];
