/**
 * The parts of `status` that say what the logs say (pure): the newest
 * published run's rejected records and standing identity conflicts, the
 * removal audit's writability, and webhook delivery lagging past
 * WEBHOOK_LAG_WARN_SECONDS. Each is a fact an operator must act on, so each
 * makes `status` exit 1 (./status-report.ts) and has a gauge on /metrics
 * (src/daemon/scrape-gauges.ts); ./status-text.ts says it in words.
 */
import type { ConflictFinding, RejectedFinding, RunFindings } from '../../db/run-findings.js';
import { truncated } from '../runtime/line-text.js';
import type { AuditFacts, RetryingDelivery } from './status-facts.js';

/** WEBHOOK_LAG_WARN_SECONDS's default, as the registry has it (src/runtime/config.ts). */
export const DEFAULT_WEBHOOK_LAG_WARN_SECONDS = 300;

export interface RejectedReport {
  run: number;
  count: number;
  /** The first few, ids and reasons truncated. */
  records: RejectedFinding[];
}

export interface ConflictReport {
  run: number;
  /** Every conflict the run counted. */
  count: number;
  /** Of those kept with ids, the ones the mirror still does not hold as listed: the service lists an id `resolve` does not answer. */
  standing: number;
  conflicts: ConflictFinding[];
}

/** The newest published run's records that were not stored; null when it stored every one (or no run published). */
export function rejectedReport(f: RunFindings | undefined): RejectedReport | null {
  if (f === undefined || f.rejected === 0) return null;
  return {
    run: f.runId,
    count: f.rejected,
    records: f.rejectedRecords.map((r) => ({
      ...r,
      userId: truncated(r.userId),
      clientUserId: truncated(r.clientUserId),
      reason: truncated(r.reason, 300),
    })),
  };
}

/** The newest published run's identity conflicts; null when it had none. */
export function conflictReport(f: RunFindings | undefined): ConflictReport | null {
  if (f === undefined || f.conflicts === 0) return null;
  return {
    run: f.runId,
    count: f.conflicts,
    standing: f.standing,
    conflicts: f.standingConflicts.map((c) =>
      c.kind === 'user_id'
        ? { ...c, earlier: truncated(c.earlier), later: truncated(c.later) }
        : { ...c, clientUserId: truncated(c.clientUserId) },
    ),
  };
}

export interface AuditReport {
  path: string;
  writable: boolean;
  problem: string | null;
  /** Whether it counts toward the exit code: the file exists, or this estate runs removals (a worker here writes it). */
  judged: boolean;
}

export function auditReport(a: AuditFacts | undefined, removalsConfigured: boolean): AuditReport | null {
  if (a === undefined) return null;
  return { path: a.path, writable: a.problem === undefined, problem: a.problem ?? null, judged: a.exists || removalsConfigured };
}

export interface WebhookLagVerdict {
  lagWarnSeconds: number;
  /** Delivery is further behind than WEBHOOK_LAG_WARN_SECONDS. */
  lagging: boolean;
  /** The first event being retried and why, or null. */
  retrying: RetryingDelivery | null;
}

export function webhookLagVerdict(
  secondsBehind: number,
  retrying: RetryingDelivery | null | undefined,
  lagWarnSeconds: number | undefined,
): WebhookLagVerdict {
  const bound = lagWarnSeconds ?? DEFAULT_WEBHOOK_LAG_WARN_SECONDS;
  return {
    lagWarnSeconds: bound,
    lagging: secondsBehind > bound,
    retrying: retrying == null ? null : { ...retrying, last: truncated(retrying.last, 300) },
  };
}
