/**
 * AUDIT_DB naming the MIRROR_DB file, as a check of a command's
 * configuration pass (`pass.check(AUDIT_LOCATION_ENV, checkAuditLocation)`),
 * so it is reported with the other problems rather than in a round of its
 * own when the audit is opened. Not in config.ts: the producer reads its
 * configuration there and must load nothing of db/ (test/release.test.ts).
 */
import { auditPathOf } from '../../db/audit-location.js';
import { ConfigError } from './config.js';

/** The audit's path; a ConfigError when it is the mirror file. */
export function checkAuditLocation(config: { MIRROR_DB: string; AUDIT_DB?: string | undefined }): string {
  const { path, problem } = auditPathOf(config);
  if (problem !== undefined) throw new ConfigError([`AUDIT_DB=${path}: ${problem}`]);
  return path;
}
