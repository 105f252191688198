/**
 * What `user-mirror status` reports, built without I/O: the command gathers
 * the facts (./status-facts.ts), this decides what they mean (age,
 * staleness, the exit code), ./status-text.ts renders it for a person. The
 * JSON form is the report object itself, so scripts and people see the
 * same facts.
 */
import type { DiskVerdict } from './disk-verdict.js';
import { describeHeldWebhooks, DURABILITY_FIX, type RemovalGate } from '../../jobs/redis-durability.js';
import { assessStaleness } from './staleness.js';
import type {
  BackupFacts,
  ExportFacts,
  FieldWarningFacts,
  QueueFacts,
  RestoreFileFacts,
  RunFacts,
  StatusFacts,
  SyncJobFacts,
} from './status-facts.js';
import type { NewestRestore } from '../../db/lineage.js';
import { walVerdict, type WalVerdict } from './wal-verdict.js';
import type { RunDrift } from '../../db/schema-drift.js';
import { webhookLag } from './webhook-lag.js';
import {
  auditReport,
  conflictReport,
  rejectedReport,
  webhookLagVerdict,
  type AuditReport,
  type ConflictReport,
  type RejectedReport,
  type WebhookLagVerdict,
} from './status-findings.js';
import type { EndpointFailure } from '../../jobs/webhooks/delivery-state.js';

/**
 * The last sync attempt, if it failed (pure): the newest run row when it
 * failed, or, newer than that row, a failed sync job of the daemon's (one
 * that could not even write its run row: a full disk, a mirror it could not
 * open). Null when the last attempt did not fail, or nothing is known.
 */
export function lastFailedAttempt(
  lastRun: { status: string; startedAt: string; finishedAt: string | null; error: string | null; id: number } | undefined,
  lastJob: SyncJobFacts | null | undefined,
): { at: string; reason: string; run: number | null } | null {
  const runAt = lastRun === undefined ? undefined : Date.parse(lastRun.startedAt);
  if (lastJob?.failedReason != null && (runAt === undefined || Date.parse(lastJob.finishedAt) > runAt) && !jobOfRun(lastJob, lastRun)) {
    return { at: lastJob.finishedAt, reason: lastJob.failedReason, run: null };
  }
  if (lastRun?.status === 'failed')
    return { at: lastRun.finishedAt ?? lastRun.startedAt, reason: lastRun.error ?? 'unknown reason', run: lastRun.id };
  return null;
}

/**
 * The mirror file's loss under the running daemon, recorded beside it, while
 * it stands (pure): until a run that started after the record succeeded in
 * the file now at MIRROR_DB. Nothing else clears it: the daemon that saw it
 * refuses every sync after it, so a sync job that finished later (in Redis,
 * even succeeded) ran on the old file, having opened it before the loss.
 */
function standingMirrorLoss(
  record: StatusFacts['recordBeside'],
  runs: ReadonlyArray<{ status: string; startedAt: string }>,
): { at: string; reason: string; run: null } | null {
  if (record?.what !== 'sync' || record.lost === undefined) return null;
  const at = Date.parse(record.at);
  if (runs.some((run) => run.status === 'succeeded' && Date.parse(run.startedAt) > at)) return null;
  return { at: record.at, reason: record.reason, run: null };
}

/**
 * The newest finished run, if it ended `partial` (pure): it published what it
 * read but deleted nothing, because it did not read the whole listing (pages
 * failed, the listing fell short of its total: src/sync/listing-check.ts) or
 * a breaker held. The mirror is not known complete until a run succeeds.
 */
function lastPartialRun(
  runs: ReadonlyArray<{ id: number; status: string; startedAt: string; finishedAt: string | null; error: string | null }>,
): { at: string; reason: string; run: number } | null {
  const newest = runs.find((run) => run.status !== 'running');
  if (newest?.status !== 'partial') return null;
  return { at: newest.finishedAt ?? newest.startedAt, reason: newest.error ?? 'no reason recorded', run: newest.id };
}

/** Of two finished attempts known elsewhere than in the run rows, the newer. */
function newerAttempt(a: SyncJobFacts | null | undefined, b: SyncJobFacts | undefined): SyncJobFacts | null | undefined {
  if (a == null) return b ?? a;
  if (b === undefined) return a;
  return Date.parse(b.finishedAt) > Date.parse(a.finishedAt) ? b : a;
}

/** A failed job whose reason names the run row itself (`sync run N failed: …`) is that run's failure, not another attempt. */
function jobOfRun(job: SyncJobFacts, run: { id: number } | undefined): boolean {
  return run !== undefined && (job.failedReason ?? '').startsWith(`sync run ${run.id} failed`);
}

/** What a removal worker started with this environment would do on this Redis. */
export interface RemovalQueueReport {
  state: 'run' | 'held';
  durable: boolean;
  volatileAllowed: boolean;
  redis: { appendonly: string; appendfsync: string; maxmemoryPolicy: string };
  reasons: string[];
  warnings: string[];
  fix?: string;
}

export interface StatusReport {
  mirror: {
    path: string;
    id: string;
    available: boolean;
    error?: string;
    /** Free space on the file system holding MIRROR_DB: `low` below MIRROR_DISK_WARN_BYTES, `full` when writes fail. */
    disk?: DiskVerdict;
    activeUsers?: number;
    deletedUsers?: number;
    lastSucceededAt?: string | null;
    ageSeconds?: number | null;
    /** On a follower: when the data was read from the service at its source, and its age (docs/followers.md). */
    source?: { at: string; ageSeconds: number };
    /** No succeeded run within SYNC_STALE_AFTER_MS (or none at all). */
    stale?: boolean;
    staleAfterSeconds?: number;
    /** Why it is stale: its age and what went wrong since the last success; null when fresh. */
    staleReason?: string | null;
    lastRuns?: RunFacts[];
    /** The last sync attempt, when it failed (lastFailedAttempt); null when it did not. */
    lastAttemptFailed?: { at: string; reason: string; run: number | null } | null;
    /** The newest finished run, when it ended partial (lastPartialRun); null when it did not. */
    lastRunPartial?: { at: string; reason: string; run: number } | null;
    /** The WAL against its threshold; undefined when unknown. */
    wal?: WalVerdict;
    /** The mirror file's free pages, in bytes: later syncs reuse them (the file is not shrunk; docs/operations.md). */
    freeBytes?: number;
    /** The last WAL checkpoint after a run failed (a full disk); retried before each run; null when it did not. */
    checkpointFailed?: { at: string; reason: string } | null;
    /** The last checkpoint that ran: frames in the WAL and those copied; the difference a reader held back. */
    lastCheckpoint?: { at: string; walFrames: number; copiedFrames: number };
    /**
     * Active users with field warnings, and the most frequent fields, list
     * indices folded (`connected_sources[].provider`); a count is of
     * warnings, so one user can count twice in a list field. Null when the
     * mirror has no field_warnings table yet.
     */
    fieldWarnings?: { usersWithWarnings: number; topFields: Array<{ field: string; count: number }> } | null;
    /** Records the newest published run listed but did not store (ids truncated, and why); null when none. */
    rejectedRecords?: RejectedReport | null;
    /** The newest published run's identity conflicts, and those whose losing id the mirror does not answer as listed; null when none. */
    identityConflicts?: ConflictReport | null;
    /** The newest published run's field warnings by rule, and the (field, rule) pairs it met first; null when none. Not a failure: tolerance. */
    schemaDrift?: RunDrift | null;
    /** The newest restore: when, from which backup, the cursors lost and the history gap; null for a file never restored. Not judged: an operator's act. */
    restore?: NewestRestore | null;
    /** Killed restores' copies and replaced files beside the mirror; shown, not judged (nothing deletes what an operator may need). */
    restoreFiles?: RestoreFileFacts;
  };
  /** The removal audit (AUDIT_DB): whether it can be written now; null when not looked at. */
  audit: AuditReport | null;
  schedule: { intervalSeconds: number };
  queues: QueueFacts;
  failedRemovals: { queue: number | null; audit: number | null };
  /** null when Redis was unreachable. */
  removalQueue: RemovalQueueReport | null;
  /** False for a sync-only estate (no MANAGEMENT_URL): Redis is then reported, not judged. */
  removalsConfigured: boolean;
  /** The change feed's extent; null when the mirror has none (yet). */
  changeFeed: { latest: number; oldest: number | null; prunedThrough: number } | null;
  /** Webhook delivery; null without WEBHOOK_URL or when Redis was unreachable. */
  webhooks:
    | ({
        target: string;
        url: string;
        dispatched: number;
        settled: number;
        eventsBehind: number;
        secondsBehind: number;
        failed: number;
        queued: number;
        /** Deliveries held because the endpoint fails; null while it answers. */
        endpointFailing: EndpointFailure | null;
        /** Why the daemon holds webhooks on this Redis (it can lose jobs: the reasons and the fix); null when they run. */
        held: string | null;
      } & WebhookLagVerdict)
    | null;
  webhooksConfigured: boolean;
  /** Scheduled backups; null without BACKUP_DIR. Failed or stale makes `status` exit 1. */
  backups: BackupFacts | null;
  /** Scheduled exports; null without EXPORT_DIR. Failed or stale makes `status` exit 1. */
  exports?: ExportFacts | null;
}

export function buildStatusReport(f: StatusFacts): StatusReport {
  const m = f.mirror;
  // A sync attempt that left no run row, as recorded beside the mirror: read like a failed job of the daemon's.
  const besideSync: SyncJobFacts | undefined =
    f.recordBeside?.what === 'sync' ? { finishedAt: f.recordBeside.at, failedReason: f.recordBeside.reason } : undefined;
  const staleness = m.available
    ? assessStaleness({
        lastSucceededAt: m.lastSucceededAt,
        lastProblem: m.lastProblem,
        running: m.running,
        sourceAt: m.sourceAt,
        now: f.now,
        staleAfterMs: f.staleAfterMs,
      })
    : undefined;
  const disk = f.disk === undefined ? {} : { disk: f.disk };
  const mirror: StatusReport['mirror'] = m.available
    ? {
        path: f.mirrorPath,
        id: f.mirrorId,
        available: true,
        ...disk,
        activeUsers: m.activeUsers,
        deletedUsers: m.deletedUsers,
        lastSucceededAt: m.lastSucceededAt?.toISOString() ?? null,
        ageSeconds: staleness?.ageSeconds ?? null,
        ...(m.sourceAt === undefined ? {} : { source: { at: m.sourceAt.toISOString(), ageSeconds: staleness?.sourceAgeSeconds ?? 0 } }),
        stale: staleness?.stale ?? true,
        staleAfterSeconds: staleness?.staleAfterSeconds ?? 0,
        staleReason: staleness?.reason ?? null,
        lastAttemptFailed:
          standingMirrorLoss(f.recordBeside, m.lastRuns) ??
          lastFailedAttempt(m.lastRuns[0], newerAttempt(f.queues.reachable ? f.queues.lastSyncJob : undefined, besideSync)),
        lastRunPartial: lastPartialRun(m.lastRuns),
        checkpointFailed: f.recordBeside?.what === 'checkpoint' ? { at: f.recordBeside.at, reason: f.recordBeside.reason } : null,
        ...(f.recordBeside?.checkpoint === undefined ? {} : { lastCheckpoint: f.recordBeside.checkpoint }),
        lastRuns: m.lastRuns,
        fieldWarnings: m.fieldWarnings === undefined ? null : summarizeWarnings(m.fieldWarnings),
        rejectedRecords: rejectedReport(m.findings),
        identityConflicts: conflictReport(m.findings),
        schemaDrift: m.schemaDrift === undefined || m.schemaDrift.byRule.length === 0 ? null : m.schemaDrift,
        ...(m.files === undefined ? {} : { wal: walVerdict(m.files, f.walWarnBytes, f.checkpoints) }),
        ...(m.files?.freeBytes === undefined ? {} : { freeBytes: m.files.freeBytes }),
        restore: m.restore ?? null,
        ...(f.restoreFiles === undefined ? {} : { restoreFiles: f.restoreFiles }),
      }
    : {
        path: f.mirrorPath,
        id: f.mirrorId,
        available: false,
        error: m.error,
        ...disk,
        ...(f.restoreFiles === undefined ? {} : { restoreFiles: f.restoreFiles }),
        lastAttemptFailed:
          besideSync === undefined ? null : { at: besideSync.finishedAt, reason: besideSync.failedReason ?? '', run: null },
      };
  return {
    mirror,
    audit: auditReport(f.audit, f.removalsConfigured),
    schedule: { intervalSeconds: Math.round(f.scheduleIntervalMs / 1000) },
    queues: f.queues,
    failedRemovals: {
      queue: f.queues.reachable ? (f.queues.removals?.counts.failed ?? null) : null,
      audit: m.available ? (m.failedRemovalsInAudit ?? null) : null,
    },
    // Without MANAGEMENT_URL there are no removals to hold: the removal queue is not reported at all.
    removalQueue: f.removalGate === undefined || !f.removalsConfigured ? null : removalQueueReport(f.removalGate),
    removalsConfigured: f.removalsConfigured,
    changeFeed:
      f.feed === undefined || f.feed === null
        ? null
        : { latest: f.feed.latest, oldest: f.feed.oldest, prunedThrough: f.feed.prunedThrough },
    webhooks: webhookReport(f),
    webhooksConfigured: f.webhooksConfigured ?? false,
    backups: f.backups ?? null,
    exports: f.exports ?? null,
  };
}

function webhookReport(f: StatusFacts): StatusReport['webhooks'] {
  const w = f.queues.reachable ? f.queues.webhooks : undefined;
  if (w === undefined || w === null) return null;
  const lag = webhookLag(Math.max(f.feed?.latest ?? 0, w.dispatched), w.settled, f.feed?.oldestUnsettledAt, f.now);
  return {
    target: w.target.id,
    url: w.target.url,
    dispatched: w.dispatched,
    ...lag,
    failed: w.counts.failed,
    queued: w.counts.waiting + w.counts.active + w.counts.delayed,
    endpointFailing: w.endpoint,
    held: (f.removalGate === undefined ? undefined : describeHeldWebhooks(f.removalGate)) ?? null,
    ...webhookLagVerdict(lag.secondsBehind, w.retrying, f.webhookLagWarnSeconds),
  };
}

function removalQueueReport(gate: RemovalGate): RemovalQueueReport {
  const v = gate.verdict;
  return {
    state: gate.state,
    durable: v.durable,
    volatileAllowed: gate.volatileAllowed,
    redis: v.settings,
    reasons: v.reasons,
    warnings: v.warnings,
    ...(v.durable ? {} : { fix: DURABILITY_FIX }),
  };
}

const TOP_FIELDS = 5;

function summarizeWarnings(f: FieldWarningFacts): { usersWithWarnings: number; topFields: Array<{ field: string; count: number }> } {
  const counts = new Map<string, number>();
  for (const { field, users } of f.byField) {
    const folded = field.replace(/\[\d+\]/g, '[]');
    counts.set(folded, (counts.get(folded) ?? 0) + users);
  }
  const topFields = [...counts]
    .map(([field, count]) => ({ field, count }))
    .sort((a, b) => b.count - a.count || a.field.localeCompare(b.field))
    .slice(0, TOP_FIELDS);
  return { usersWithWarnings: f.users, topFields };
}

/**
 * `status`'s exit code: 0 when nothing needs attention; 1 when something
 * does: the mirror is unreadable or stale, its last sync attempt failed (lastFailedAttempt) or its file was lost under
 * the running daemon and no sync has succeeded in the file now at MIRROR_DB since (standingMirrorLoss), its newest
 * finished run ended partial (lastPartialRun: not known complete), its
 * last checkpoint failed, its WAL is too large (walVerdict), or the file system holding it is low
 * on space or full (./disk-verdict.ts); and where removals are
 * configured (MANAGEMENT_URL), Redis is unreachable (the queue, and so the
 * removals, are out of sight), removals are held, or some wait in the queue
 * no worker takes; where webhooks are configured (WEBHOOK_URL), Redis is
 * unreachable, its endpoint fails, the Redis can lose jobs (deliveries held either way), or delivery lags
 * past WEBHOOK_LAG_WARN_SECONDS (a receiver that times out, or too slow). In every estate, also: the
 * newest published run rejected records or left identity conflicts standing (the mirror contradicts
 * the service's listing), or the removal audit cannot be written (./status-findings.ts). Failed
 * webhook events are shown, not judged (like failed removals: the operator's to-do list). A sync-only
 * estate needs no Redis: it is shown, not judged.
 */
export function statusExitCode(r: StatusReport): 0 | 1 {
  if (r.backups !== null && (r.backups.failed !== null || r.backups.stale)) return 1;
  if (r.exports != null && (r.exports.failed !== null || r.exports.stale)) return 1;
  const mirrorOk =
    r.mirror.available &&
    r.mirror.stale !== true &&
    r.mirror.wal?.tooLarge !== true &&
    (r.mirror.disk?.state ?? 'ok') === 'ok' &&
    (r.mirror.lastAttemptFailed ?? null) === null &&
    (r.mirror.lastRunPartial ?? null) === null &&
    (r.mirror.checkpointFailed ?? null) === null &&
    (r.mirror.rejectedRecords ?? null) === null &&
    (r.mirror.identityConflicts?.standing ?? 0) === 0 &&
    !(r.audit?.judged === true && !r.audit.writable);
  if (!r.removalsConfigured && !r.webhooksConfigured) return mirrorOk ? 0 : 1;
  if (r.webhooks?.endpointFailing != null || r.webhooks?.held != null || r.webhooks?.lagging === true) return 1;
  if (!r.removalsConfigured) return mirrorOk && r.queues.reachable ? 0 : 1;
  const removalsHeld = r.removalQueue?.state === 'held';
  const unbound = r.queues.reachable && r.queues.unboundRemovals > 0;
  const healthy = mirrorOk && r.queues.reachable && !removalsHeld && !unbound;
  return healthy ? 0 : 1;
}
