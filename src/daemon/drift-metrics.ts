/**
 * Schema drift on /metrics, read from the mirror on scrape (db/schema-drift.ts):
 * `user_mirror_field_warnings_total{field,rule}` adds up the records with a
 * warning of every run published since the daemon started (the sync runs in
 * a child process; the mirror is where its counts meet the daemon), and
 * `user_mirror_schema_drift_first_seen_timestamp_seconds{field,rule}` says
 * when the mirror first met each pair, which an alert can compare with
 * `time()` whatever the daemon's restarts. Both label sets are bounded: the
 * sync folds field names (src/sync/drift-tally.ts), and at most
 * MAX_PAIRS pairs, the newest, are exported.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { CurrentSources, DriftSource } from './scrape-gauges.js';

/** Pairs exported at most: a mirror meets a handful over its life; the bound only stops a runaway. */
const MAX_PAIRS = 100;

export function registerDriftMetrics(registers: Registry[], current: CurrentSources): void {
  // An unreadable mirror shows in user_mirror_mirror_up and status, not as a failed scrape.
  const read = (use: (source: DriftSource) => void): void => {
    const source = current().schemaDrift;
    if (source === undefined) return;
    try {
      use(source);
    } catch {
      // The metrics keep their last values.
    }
  };
  let counted: number | undefined;
  const labelled = new Set<string>();
  const label = (field: string, rule: string): boolean => {
    const key = `${field}\t${rule}`;
    if (labelled.has(key)) return true;
    if (labelled.size >= MAX_PAIRS) return false;
    labelled.add(key);
    return true;
  };
  const warnings = new Counter({
    name: 'user_mirror_field_warnings_total',
    help: 'Records written by sync runs (published since the daemon started) that carried a field warning, by top-level field and rule; rule new_field: a key the schema does not know.',
    labelNames: ['field', 'rule'] as const,
    registers,
    collect() {
      read((source) => {
        if (counted === undefined) {
          counted = source.startRunId;
          // Pairs met before start at 0, so that increase() sees their next records.
          for (const p of source.pairs(MAX_PAIRS)) if (label(p.field, p.rule)) warnings.inc({ field: p.field, rule: p.rule }, 0);
        }
        const next = source.since(counted);
        for (const c of next.counts) if (label(c.field, c.rule)) warnings.inc({ field: c.field, rule: c.rule }, c.records);
        counted = next.lastRunId;
      });
    },
  });
  const firstSeen = new Gauge({
    name: 'user_mirror_schema_drift_first_seen_timestamp_seconds',
    help: 'When the mirror first met each (field, rule) field warning, Unix seconds; the newest 100 pairs.',
    labelNames: ['field', 'rule'] as const,
    registers,
    collect() {
      read((source) => {
        const pairs = source.pairs(MAX_PAIRS);
        firstSeen.reset();
        for (const p of pairs) firstSeen.set({ field: p.field, rule: p.rule }, Date.parse(p.firstSeenAt) / 1000);
      });
    },
  });
}
