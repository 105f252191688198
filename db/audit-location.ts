/**
 * Where the removal audit lives, as paths only (no SQLite here, so the
 * configuration can ask without loading a driver): AUDIT_DB, or next to
 * MIRROR_DB (`./data/mirror.db` -> `./data/mirror-audit.db`). Naming the
 * mirror file itself is a configuration error: the audit would again wait
 * behind every sync's publish (db/open-audit.ts says why it has a file of
 * its own).
 */
import { resolve } from 'node:path';

/** The default AUDIT_DB for a mirror file: `<mirror without .db>-audit.db` in the same directory. */
export function auditPathFor(mirrorPath: string): string {
  if (mirrorPath === ':memory:') return ':memory:';
  return `${mirrorPath.replace(/\.(db|sqlite3?)$/i, '')}-audit.db`;
}

/** Whether two paths name one file as far as their text can tell (symlinks aside). */
export function samePath(a: string, b: string): boolean {
  return a !== ':memory:' && b !== ':memory:' && resolve(a) === resolve(b);
}

/** The variables that place the audit. */
export const AUDIT_LOCATION_ENV = ['MIRROR_DB', 'AUDIT_DB'] as const;

const AUDIT_IS_MIRROR = 'must not be the MIRROR_DB file (the audit would wait behind every sync publish)';

/** The audit's path, and why it cannot be (undefined when it can). */
export function auditPathOf(settings: { MIRROR_DB: string; AUDIT_DB?: string | undefined }): { path: string; problem?: string } {
  const path = settings.AUDIT_DB ?? auditPathFor(settings.MIRROR_DB);
  return samePath(path, settings.MIRROR_DB) ? { path, problem: AUDIT_IS_MIRROR } : { path };
}
