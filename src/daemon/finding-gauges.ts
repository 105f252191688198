/**
 * The gauges of what `status` judges beyond the mirror's age, read on
 * scrape: the newest run's rejected records and standing identity
 * conflicts (db/run-findings.ts), and whether the removal audit can be
 * written.
 */
import { Gauge, type Registry } from 'prom-client';
import type { RunFindings } from '../../db/run-findings.js';
import { MIRROR_CACHE_MS, type CurrentSources } from './scrape-gauges.js';

/** What `status` judges beyond the mirror's age: the newest run's findings, and the removal audit. */
export function registerFindingGauges(registers: Registry[], current: CurrentSources): void {
  let cached: { at: number; findings: RunFindings | undefined } | undefined;
  const readFindings = (): RunFindings | undefined => {
    const now = Date.now();
    if (cached !== undefined && now - cached.at < MIRROR_CACHE_MS) return cached.findings;
    let findings: RunFindings | undefined;
    try {
      findings = current().findings?.();
    } catch {
      findings = undefined;
    }
    cached = { at: now, findings };
    return findings;
  };
  const conflicts = new Gauge({
    name: 'user_mirror_identity_conflicts',
    help: 'Identity conflicts of the newest published sync run whose losing id the mirror does not hold as the service listed it (resolve exits 3 for a listed client_user_id); 0 when none.',
    registers,
    collect() {
      const f = readFindings();
      if (current().findings !== undefined) conflicts.set(f?.standing ?? 0);
    },
  });
  const rejected = new Gauge({
    name: 'user_mirror_rejected_records',
    help: 'Records the newest published sync run listed but did not store (no valid identity, or above SYNC_MAX_RECORD_BYTES); ids in rejected_records.',
    registers,
    collect() {
      const f = readFindings();
      if (current().findings !== undefined) rejected.set(f?.rejected ?? 0);
    },
  });
  const audit = new Gauge({
    name: 'user_mirror_audit_writable',
    help: "Whether the removal audit (AUDIT_DB) can be written now: 0 when read-only, not this account's, or its disk full (a removal worker then holds its removals).",
    registers,
    collect() {
      const read = current().audit;
      if (read !== undefined) audit.set(read() === undefined ? 1 : 0);
    },
  });
}
