/**
 * How a sync run ends: its summary (what the caller, the daemon's status and
 * the CLI see), its sync_runs row finished, and its one `sync.finished` log
 * line. Both endings are here, a published run's (succeeded or partial) and
 * a failed one's, so that the summary and the row always say the same.
 */
import { NO_CANDIDATES, type CandidateCounts } from '../../db/sync-runs.js';
import type { IdentityConflict } from '../../db/identity-conflicts.js';
import { errorMessage } from '../runtime/line-text.js';
import type { RunWriter } from './run-writer.js';
import type { PassResult } from './scan.js';
import { logRejected, logSchemaDrift } from './run-log.js';
import type { Logger } from 'pino';

/** A run's outcome; what each means, and why: ./engine.ts's header. */
export type SyncStatus = 'succeeded' | 'partial' | 'failed';

/** What one run did, as runSync (./engine.ts) returns it. */
export interface SyncSummary extends CandidateCounts {
  runId: number;
  status: SyncStatus;
  /** Pages fetched, the first included. */
  pages: number;
  pageFailures: number;
  /** Distinct users listed. */
  usersSeen: number;
  created: number;
  updated: number;
  deleted: number;
  /** Of `deleted`: users whose client_user_id a newer record took over. */
  superseded: number;
  rejected: number;
  /** Records listed twice (the listing shifted); the later listing counts. */
  duplicates: number;
  /** Listings of this scan that disagreed on who is who; the later won (db/identity-conflicts.ts). */
  identityConflicts: number;
  /** Pages that carried more records than the limit asked for (kept). */
  oversizePages: number;
  /** Pages asked for again because the listing fell short of its total (./listing-check.ts); included in `pages`. Absent: none. */
  rereadPages?: number;
  /** The lowest `total` a page reported; far below totalAtStart, the run is `partial` (deletions.ts). */
  totalLowest: number | undefined;
  /** `total` on the first page, and on the last page to arrive; undefined when never read. */
  totalAtStart: number | undefined;
  totalAtEnd: number | undefined;
  durationMs: number;
  /** Why the run is not `succeeded`. */
  reason?: string;
}

/** Why a run whose deletions were held is `partial`: the plan's reason, the first failed page's, and an abandoned scan. */
export function partialReason(held: string, scan: PassResult): string {
  const f = scan.failures[0];
  const first = f === undefined ? '' : ` (first: offset ${f.offset}: ${errorMessage(f.error)})`;
  return held + first + (scan.abandoned ? ' (scan stopped early: the service kept failing)' : '');
}

/**
 * Finishes a published run's row with its summary (`candidates`: what became of the deletion candidates;
 * `conflicts`: the identity conflicts kept with their ids, stored with the row for `status`), and logs it.
 */
export function finishPublished(
  writer: RunWriter,
  log: Logger,
  summary: SyncSummary,
  candidates: CandidateCounts,
  conflicts: readonly IdentityConflict[] = [],
): SyncSummary {
  const { status, reason } = summary;
  logRejected(log, summary.runId, summary.rejected, writer.rejectedOf(summary.runId));
  const fresh = writer.finishRun(summary.runId, {
    status,
    totalAtEnd: summary.totalAtEnd,
    pages: summary.pages,
    usersSeen: summary.usersSeen,
    error: reason,
    sweepSkippedReason: reason,
    created: summary.created,
    updated: summary.updated,
    deleted: summary.deleted,
    rejected: summary.rejected,
    duplicates: summary.duplicates,
    candidates,
    identityConflicts: summary.identityConflicts,
    oversizePages: summary.oversizePages,
    totalLowest: summary.totalLowest,
    conflictIds: conflicts,
  });
  logSchemaDrift(log, summary.runId, fresh);
  if (status === 'succeeded') log.info({ event: 'sync.finished', ...summary }, 'sync succeeded');
  else log.warn({ event: 'sync.finished', ...summary }, `sync partial: ${reason ?? ''}`);
  return summary;
}

/** Records a failed run, with what it had read, and leaves the published mirror as it was. */
export function finishFailed(
  writer: RunWriter,
  log: Logger,
  runId: number,
  started: number,
  totalAtStart: number | undefined,
  reason: string,
  read: { pages: number; usersSeen: number },
): SyncSummary {
  // Finishing an unpublished run rolls its transaction back: nothing of it is published.
  writer.finishRun(runId, { status: 'failed', pages: read.pages, usersSeen: read.usersSeen, error: reason });
  const summary: SyncSummary = {
    runId,
    status: 'failed',
    pages: read.pages,
    pageFailures: 0,
    usersSeen: read.usersSeen,
    created: 0,
    updated: 0,
    deleted: 0,
    superseded: 0,
    rejected: 0,
    duplicates: 0,
    identityConflicts: 0,
    oversizePages: 0,
    ...NO_CANDIDATES,
    totalAtStart,
    totalAtEnd: undefined,
    totalLowest: undefined,
    durationMs: Math.round(performance.now() - started),
    reason,
  };
  log.error({ event: 'sync.finished', ...summary }, `sync failed: ${reason}`);
  return summary;
}
