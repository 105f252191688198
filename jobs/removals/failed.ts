/**
 * Failed removals, as an operator sees them: BullMQ's failed set (what can
 * be retried) joined with the audit (who asked, and failures whose job is no
 * longer in Redis), and retrying them.
 */
import type { Job } from 'bullmq';
import type { RemovalAudit, RemovalAuditRow } from '../../db/removal-audit.js';
import type { RemovalQueue } from './queue-handle.js';
import { retryAllFailedJobs, retryFailedJob, type RetryResult } from '../retry-failed.js';
import { checkRemovalPayload } from './contract.js';
import { isRecord } from '../../src/runtime/is-record.js';

export interface FailedRemoval {
  job_id: string;
  org_id: string | null;
  member_id: string | null;
  attempts: number;
  failed_at: string | null;
  reason: string | null;
  requested_by: string | null;
  requested_at: string | null;
  /** Still in BullMQ's failed set, so `removals retry` can re-run it. */
  in_queue: boolean;
  /** In the queue and with a valid payload: a retry can do something (an invalid one would only fail again). */
  retryable: boolean;
  /** The host whose worker failed it last: its audit file holds the row. Null when not known (audit-only entries). */
  host: string | null;
}

/** The fields of a failed BullMQ job the listing uses (data is untrusted: it may be why it failed). */
export interface FailedJobView {
  id: string;
  data: unknown;
  attemptsMade: number;
  failedReason: string | undefined;
  finishedOn: number | undefined;
  timestamp: number;
  processedBy: string | undefined;
}

/** Pure: one entry per job, queue first (newest failure first), then audit-only failures. */
export function mergeFailedRemovals(jobs: readonly FailedJobView[], rows: readonly RemovalAuditRow[]): FailedRemoval[] {
  const byJob = new Map<string, RemovalAuditRow>();
  for (const row of rows) if (!byJob.has(row.job_id)) byJob.set(row.job_id, row);
  const out: FailedRemoval[] = [];
  const seen = new Set<string>();
  for (const job of jobs) {
    const row = byJob.get(job.id);
    const data = isRecord(job.data) ? job.data : {};
    seen.add(job.id);
    out.push({
      job_id: job.id,
      org_id: row?.org_id ?? stringOrNull(data.org_id),
      member_id: row?.member_id ?? stringOrNull(data.member_id),
      attempts: Math.max(job.attemptsMade, row?.attempts ?? 0),
      failed_at: job.finishedOn !== undefined ? new Date(job.finishedOn).toISOString() : (row?.finished_at ?? null),
      reason: job.failedReason ?? row?.last_error ?? null,
      requested_by: row?.requested_by ?? stringOrNull(data.requested_by),
      requested_at: Number.isFinite(job.timestamp) ? new Date(job.timestamp).toISOString() : null,
      in_queue: true,
      retryable: checkRemovalPayload(job.data).ok,
      host: hostOf(job.processedBy),
    });
  }
  for (const row of rows) {
    if (seen.has(row.job_id) || row.status !== 'failed') continue;
    seen.add(row.job_id);
    out.push({
      job_id: row.job_id,
      org_id: row.org_id,
      member_id: row.member_id,
      attempts: row.attempts,
      failed_at: row.finished_at,
      reason: row.last_error,
      requested_by: row.requested_by,
      requested_at: row.requested_at,
      in_queue: false,
      retryable: false,
      host: null,
    });
  }
  return out;
}

export async function listFailedRemovals(queue: RemovalQueue, audit: RemovalAudit | undefined, limit: number): Promise<FailedRemoval[]> {
  const jobs = (await queue.getFailed(0, limit - 1)).map(viewOf);
  const rows = audit?.list({ status: 'failed', limit }) ?? [];
  const merged = mergeFailedRemovals(jobs, rows).slice(0, limit);
  // An audit-only entry may just be past the page of the failed set that was read.
  for (const entry of merged) {
    if (entry.in_queue) continue;
    entry.in_queue = (await queue.getJobState(entry.job_id)) === 'failed';
    // The audit only records a removal whose payload it could read.
    entry.retryable = entry.in_queue && entry.org_id !== null && entry.member_id !== null;
  }
  return merged;
}

/** Re-queues a failed removal with a fresh attempt budget (the old one is spent). */
export function retryFailedRemoval(queue: RemovalQueue, jobId: string): Promise<RetryResult> {
  return retryFailedJob(queue, jobId);
}

/** Every removal failed at the time of the call. */
export function retryAllFailedRemovals(queue: RemovalQueue, pageSize = 500): Promise<RetryResult[]> {
  return retryAllFailedJobs(queue, {}, pageSize);
}

function viewOf(job: Job): FailedJobView {
  return {
    id: job.id ?? '',
    data: job.data as unknown,
    attemptsMade: job.attemptsMade,
    failedReason: job.failedReason ?? undefined,
    finishedOn: job.finishedOn ?? undefined,
    timestamp: job.timestamp,
    processedBy: job.processedBy ?? undefined,
  };
}

/** Worker names are `<host>:<pid>` (worker.ts). */
function hostOf(workerName: string | undefined): string | null {
  if (workerName === undefined || workerName === '') return null;
  const colon = workerName.lastIndexOf(':');
  return colon > 0 ? workerName.slice(0, colon) : workerName;
}

export interface HostOutcomes {
  host: string;
  total: number;
  outcomes: Record<string, number>;
}

/**
 * Who recorded what, across the estate: the last `limit` completed and
 * failed jobs still in Redis, grouped by the host whose worker finished them
 * (that host's audit file holds their rows).
 */
export async function recentOutcomesByHost(queue: RemovalQueue, limit = 1_000): Promise<HostOutcomes[]> {
  const [completed, failed] = await Promise.all([queue.getCompleted(0, limit - 1), queue.getFailed(0, limit - 1)]);
  const byHost = new Map<string, HostOutcomes>();
  const count = (job: Job, outcome: string): void => {
    const host = hostOf(job.processedBy ?? undefined) ?? '(unknown)';
    const entry = byHost.get(host) ?? { host, total: 0, outcomes: {} };
    entry.total += 1;
    entry.outcomes[outcome] = (entry.outcomes[outcome] ?? 0) + 1;
    byHost.set(host, entry);
  };
  for (const job of completed)
    count(job, isRecord(job.returnvalue) && typeof job.returnvalue.status === 'string' ? job.returnvalue.status : 'completed');
  for (const job of failed) count(job, 'failed');
  return [...byHost.values()].sort((a, b) => a.host.localeCompare(b.host));
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}
