/** The audit file's migrations (AUDIT_DB), numbered on their own. Append; never edit one that has shipped. */
import type { Migration } from '../migrate.js';
import { auditSchema } from './001-member-removals.js';
import { removalTarget } from './002-removal-target.js';

export const AUDIT_MIGRATIONS: readonly Migration[] = [auditSchema, removalTarget];
