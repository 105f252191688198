/**
 * What a sync run tells its log about the scan it read: failed pages, an
 * abandoned scan, envelope keys this version does not use, oversize pages,
 * a listing that moved or collapsed, identity conflicts. Apart from the run
 * (./engine.ts) so that the run reads as its steps; each line here is a
 * fact an operator looks for by its `event`. Logging only: no decisions.
 */
import type { IdentityConflict } from '../../db/identity-conflicts.js';
import type { RejectedRow } from '../../db/sync-runs.js';
import type { RunFieldWarning } from '../../db/schema-drift.js';
import { truncated } from '../runtime/line-text.js';
import { logError } from '../runtime/log-error.js';
import { MAX_PAGE_LIMIT } from '../service/schemas.js';
import type { PassResult } from './scan.js';
import type { Logger } from 'pino';

/** Everything the scan met on the way that is not a record: failures, oddities of the listing. */
export function logScan(log: Logger, scan: PassResult): void {
  for (const f of scan.failures) {
    logError(log, 'warn', { event: 'sync.page_failed', offset: f.offset, err: f.error }, 'page failed');
  }
  if (scan.abandoned) {
    log.warn({ event: 'sync.abandoned', pageFailures: scan.pageFailures }, 'pages kept failing; stopped the scan early');
  }
  if (scan.unknownEnvelopeKeys.size > 0) {
    log.info(
      { event: 'sync.unknown_envelope_keys', keys: [...scan.unknownEnvelopeKeys] },
      'the list pages carry keys this version does not use',
    );
  }
  for (const o of scan.oversize) {
    log.warn(
      { event: 'sync.oversize_page', offset: o.offset, records: o.records, limit: MAX_PAGE_LIMIT, pages: scan.oversizePages },
      'a page carried more records than the limit asked for; all were kept',
    );
  }
  if (scan.duplicates > 0 || scan.totalAtEnd !== scan.totalAtStart) logListingMoved(log, scan);
}

/** A listing whose `total` collapsed during the scan: its deletions are held back (./deletions.ts), `reason` says why. */
export function logCollapsed(log: Logger, runId: number, scan: PassResult, reason: string): void {
  log.warn(
    {
      event: 'sync.total_collapsed',
      runId,
      totalAtStart: scan.totalAtStart,
      totalLowest: scan.totalLowest,
      totalAtEnd: scan.totalAtEnd,
    },
    reason,
  );
}

/** Each conflict kept, with its ids, then the count: the mirror kept the later listing (db/identity-conflicts.ts). */
export function logConflicts(log: Logger, runId: number, conflicts: { count: number; kept: IdentityConflict[] }): void {
  for (const c of conflicts.kept) {
    const message =
      c.kind === 'user_id'
        ? 'one user_id listed under two client_user_ids in this scan; the later listing holds the user'
        : 'one client_user_id listed for two users in this scan; the later keeps it, the earlier is stored deleted';
    log.warn({ event: 'sync.identity_conflict', runId, ...c }, message);
  }
  if (conflicts.count > conflicts.kept.length) {
    log.warn(
      { event: 'sync.identity_conflicts', runId, count: conflicts.count, logged: conflicts.kept.length },
      'more identity conflicts in this scan than logged one by one',
    );
  }
}

/** Repeated listings, or a `total` that changed: the directory moved under the scan. */
export function logListingMoved(log: Logger, scan: Pick<PassResult, 'duplicates' | 'totalAtStart' | 'totalAtEnd'>): void {
  log.info(
    { event: 'sync.listing_moved', duplicates: scan.duplicates, totalAtStart: scan.totalAtStart, totalAtEnd: scan.totalAtEnd },
    'the directory changed during the scan; missing users are checked before any deletion',
  );
}

/** Rejected records logged one by one per run; the rest are counted (`sync_runs.rejected`) and stored (`rejected_records`). */
const REJECTED_LOGGED = 5;

/** The run's rejected records at warn, with their ids (truncated) and why: a user the mirror does not hold as listed. */
export function logRejected(log: Logger, runId: number, count: number, kept: readonly RejectedRow[]): void {
  if (count === 0) return;
  for (const r of kept.slice(0, REJECTED_LOGGED)) {
    log.warn(
      {
        event: 'sync.rejected_record',
        runId,
        offset: r.offset,
        index: r.index,
        userId: truncated(r.userId),
        clientUserId: truncated(r.clientUserId),
        reason: truncated(r.reason, 300),
      },
      'a listed record was not stored; the mirror keeps its previous version, if any',
    );
  }
  if (count > REJECTED_LOGGED)
    log.warn(
      { event: 'sync.rejected_records', runId, count, logged: Math.min(count, REJECTED_LOGGED) },
      'more rejected records than logged one by one',
    );
}

/**
 * Schema drift the mirror meets for the first time: one warn line per new
 * (field, rule) pair, with counts only (a record's values and ids stay out).
 * Later runs count the pair in `user_mirror_field_warnings_total` silently.
 */
export function logSchemaDrift(log: Logger, runId: number, fresh: readonly RunFieldWarning[]): void {
  for (const d of fresh) {
    const what =
      d.rule === 'new_field' ? `records carry a field the schema does not know: ${d.field}` : `${d.field} breaks its rule (${d.rule})`;
    log.warn({ event: 'sync.schema_drift', runId, field: d.field, rule: d.rule, records: d.records }, `schema drift, first seen: ${what}`);
  }
}
