/**
 * Where the removal audit lives: AUDIT_DB, or next to MIRROR_DB
 * (db/open-audit.ts says why it is a file of its own). Naming the mirror
 * file itself is a configuration error: the audit would again wait behind
 * every sync's publish.
 */
import { ConfigError, type Config } from './config.js';
import { auditPathFor, samePath } from '../db/open-audit.js';

export const AUDIT_LOCATION_ENV = ['MIRROR_DB', 'AUDIT_DB'] as const;

export function auditLocation(config: Config<(typeof AUDIT_LOCATION_ENV)[number]>): string {
  const path = config.AUDIT_DB ?? auditPathFor(config.MIRROR_DB);
  if (samePath(path, config.MIRROR_DB)) {
    throw new ConfigError(['AUDIT_DB: must not be the MIRROR_DB file (the audit would wait behind every sync publish)']);
  }
  return path;
}
