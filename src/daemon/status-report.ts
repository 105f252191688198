/**
 * What `user-mirror status` reports, built and rendered without I/O: the
 * command gathers the facts, this decides what they mean (age, staleness)
 * and how they read. The JSON form is the report object itself, so scripts
 * and people see the same facts.
 */
import type { CandidateCounts } from '../../db/sync-runs.js';
import { describeHeldWebhooks, DURABILITY_FIX, type RemovalGate } from '../../jobs/redis-durability.js';
import type { EndpointFailure } from '../../jobs/webhooks/queue.js';
import { assessStaleness, formatAge, oneLine, type RunTrouble } from './staleness.js';

export interface RunFacts {
  id: number;
  status: string;
  startedAt: string;
  finishedAt: string | null;
  usersSeen: number;
  created: number;
  updated: number;
  deleted: number;
  /** What became of the users the run's listing did not show. */
  candidates: CandidateCounts;
  /** What the listing did that it should not: identity conflicts, oversize pages, a `total` that fell mid-scan. */
  anomalies: RunAnomalies;
  totalAtStart: number | null;
  error: string | null;
}

export interface RunAnomalies {
  identityConflicts: number;
  oversizePages: number;
  totalLowest: number | null;
}

export interface QueueCounts {
  waiting: number;
  active: number;
  delayed: number;
  failed: number;
  completed: number;
}

/** The removal queue of MANAGEMENT_URL's target, across every host; null when MANAGEMENT_URL is unset. */
export interface RemovalQueueFacts {
  target: { id: string; url: string; queue: string };
  counts: QueueCounts;
  /** Recent outcomes per host whose worker (and audit) recorded them. */
  hosts: Array<{ host: string; total: number; outcomes: Record<string, number> }>;
}

/** The webhook queue of WEBHOOK_URL's target; null when WEBHOOK_URL is unset. */
export interface WebhookQueueFacts {
  target: { id: string; url: string; queue: string };
  counts: QueueCounts;
  /** The highest cursor handed to the queue, and the highest settled (delivered, or failed for good) in order. */
  dispatched: number;
  settled: number;
  /** The endpoint failing (a redirect, 401, 403, 404, 410, DNS, TLS: deliveries held), or null. */
  endpoint: EndpointFailure | null;
}

/** The mirror's change feed (db/change-feed.ts); null when the mirror has none yet. */
export interface FeedFacts {
  latest: number;
  oldest: number | null;
  prunedThrough: number;
  /** When the oldest event not yet settled by the webhook was published; undefined when none or unknown. */
  oldestUnsettledAt?: string | undefined;
}

export type QueueFacts =
  | {
      reachable: true;
      sync: QueueCounts;
      /** The daemon's newest finished sync job: a failure here with no run row is a sync that could not even record itself (a full disk). */
      lastSyncJob?: SyncJobFacts | null;
      removals: RemovalQueueFacts | null;
      webhooks?: WebhookQueueFacts | null;
      /** Jobs of an older producer that name no target: no worker takes them (jobs/removals/unbound.ts). */
      unboundRemovals: number;
    }
  | { reachable: false; error: string };

/** A finished sync job as BullMQ keeps it (a day): when, and why it failed. */
export interface SyncJobFacts {
  finishedAt: string;
  failedReason: string | null;
}

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

/** Field warnings of active users, per field path as stored. */
export interface FieldWarningFacts {
  users: number;
  byField: Array<{ field: string; users: number }>;
}

export type MirrorFacts =
  | {
      available: true;
      /** Undefined for a mirror not yet migrated to field_warnings. */
      fieldWarnings?: FieldWarningFacts | undefined;
      activeUsers: number;
      deletedUsers: number;
      lastSucceededAt: Date | undefined;
      lastRuns: RunFacts[];
      /** Failed removals recorded in the audit; undefined when there is no audit table. */
      failedRemovalsInAudit: number | undefined;
      /** The change feed's extent; null for a mirror written before it. */
      feed?: FeedFacts | null;
      /** What went wrong since the last success (see staleness.ts). */
      lastProblem?: RunTrouble | undefined;
      running?: RunTrouble | undefined;
      /** The mirror file's and its WAL's sizes; undefined for an in-memory mirror. */
      /** Sizes of the mirror's file and WAL; `freeBytes`: the file's free pages, reused by later syncs. */
      files?: { mirrorBytes: number; walBytes: number; freeBytes?: number } | undefined;
    }
  | { available: false; error: string };

/** 1.5 MB, 433 MB: sizes for a status line. */
export function formatBytes(n: number): string {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GB`;
}

/** Below this a WAL is never a problem: a first sync's WAL is the size of the mirror until its checkpoint. */
export const WAL_WARN_FLOOR_BYTES = 64 * 1024 * 1024;

/**
 * Whether the mirror's WAL is too large (pure): above MIRROR_WAL_WARN_BYTES,
 * or by default above half the mirror (at least 64 MiB). Every sync ends
 * with a checkpoint that empties the WAL; one that keeps growing means a
 * reader holds a read transaction open across syncs, so no checkpoint can
 * finish (measured: ~71 MB a sync at 100,000 users with churn).
 */
export function walVerdict(
  files: { mirrorBytes: number; walBytes: number },
  warnBytes: number | undefined,
): { walBytes: number; mirrorBytes: number; warnAtBytes: number; tooLarge: boolean } {
  const warnAtBytes = warnBytes ?? Math.max(WAL_WARN_FLOOR_BYTES, Math.floor(files.mirrorBytes / 2));
  return { ...files, warnAtBytes, tooLarge: files.walBytes > warnAtBytes };
}

export interface StatusFacts {
  mirrorPath: string;
  mirrorId: string;
  now: Date;
  scheduleIntervalMs: number;
  /** SYNC_STALE_AFTER_MS as resolved (staleness.ts `staleAfterMs`). */
  staleAfterMs: number;
  mirror: MirrorFacts;
  queues: QueueFacts;
  /** Whether Redis keeps queued jobs (removals, webhooks); undefined when Redis could not be asked. */
  removalGate?: RemovalGate | undefined;
  /** MANAGEMENT_URL is set: this estate runs removals, so Redis matters to `status`'s verdict. */
  removalsConfigured: boolean;
  feed?: FeedFacts | null;
  /** WEBHOOK_URL is set: Redis matters to the verdict, as for removals. */
  webhooksConfigured?: boolean;
  /** MIRROR_WAL_WARN_BYTES; undefined: the default (walVerdict). */
  walWarnBytes?: number | undefined;
  /**
   * The record kept beside the mirror (src/sync/attempt-record.ts): a failure
   * the mirror could not record in itself, or the last checkpoint's figures.
   */
  recordBeside?:
    | {
        at: string;
        what: 'ok' | 'sync' | 'checkpoint';
        reason: string;
        checkpoint?: { at: string; walFrames: number; copiedFrames: number };
      }
    | undefined;
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
    activeUsers?: number;
    deletedUsers?: number;
    lastSucceededAt?: string | null;
    ageSeconds?: number | null;
    /** No succeeded run within SYNC_STALE_AFTER_MS (or none at all). */
    stale?: boolean;
    staleAfterSeconds?: number;
    /** Why it is stale: its age and what went wrong since the last success; null when fresh. */
    staleReason?: string | null;
    lastRuns?: RunFacts[];
    /** The last sync attempt, when it failed (lastFailedAttempt); null when it did not. */
    lastAttemptFailed?: { at: string; reason: string; run: number | null } | null;
    /** The WAL against its threshold; undefined when unknown. */
    wal?: ReturnType<typeof walVerdict>;
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
  };
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
  webhooks: {
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
  } | null;
  webhooksConfigured: boolean;
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
        now: f.now,
        staleAfterMs: f.staleAfterMs,
      })
    : undefined;
  const mirror: StatusReport['mirror'] = m.available
    ? {
        path: f.mirrorPath,
        id: f.mirrorId,
        available: true,
        activeUsers: m.activeUsers,
        deletedUsers: m.deletedUsers,
        lastSucceededAt: m.lastSucceededAt?.toISOString() ?? null,
        ageSeconds: staleness?.ageSeconds ?? null,
        stale: staleness?.stale ?? true,
        staleAfterSeconds: staleness?.staleAfterSeconds ?? 0,
        staleReason: staleness?.reason ?? null,
        lastAttemptFailed: lastFailedAttempt(
          m.lastRuns[0],
          newerAttempt(f.queues.reachable ? f.queues.lastSyncJob : undefined, besideSync),
        ),
        checkpointFailed: f.recordBeside?.what === 'checkpoint' ? { at: f.recordBeside.at, reason: f.recordBeside.reason } : null,
        ...(f.recordBeside?.checkpoint === undefined ? {} : { lastCheckpoint: f.recordBeside.checkpoint }),
        lastRuns: m.lastRuns,
        fieldWarnings: m.fieldWarnings === undefined ? null : summarizeWarnings(m.fieldWarnings),
        ...(m.files === undefined ? {} : { wal: walVerdict(m.files, f.walWarnBytes) }),
        ...(m.files?.freeBytes === undefined ? {} : { freeBytes: m.files.freeBytes }),
      }
    : {
        path: f.mirrorPath,
        id: f.mirrorId,
        available: false,
        error: m.error,
        lastAttemptFailed:
          besideSync === undefined ? null : { at: besideSync.finishedAt, reason: besideSync.failedReason ?? '', run: null },
      };
  return {
    mirror,
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
  };
}

/**
 * How far webhook delivery is behind, from the feed's newest cursor, the
 * settled cursor and when the first unsettled event was published: what
 * `status`, /metrics and /readyz all say (src/daemon/change-delivery.ts).
 */
export function webhookLag(
  latest: number,
  settled: number,
  oldestUnsettledAt: string | undefined,
  now: Date,
): { settled: number; eventsBehind: number; secondsBehind: number } {
  const upTo = Math.min(settled, latest);
  const secondsBehind =
    latest > upTo && oldestUnsettledAt !== undefined ? Math.max(0, Math.round((now.getTime() - Date.parse(oldestUnsettledAt)) / 1000)) : 0;
  return { settled: upTo, eventsBehind: latest - upTo, secondsBehind };
}

function webhookReport(f: StatusFacts): StatusReport['webhooks'] {
  const w = f.queues.reachable ? f.queues.webhooks : undefined;
  if (w === undefined || w === null) return null;
  return {
    target: w.target.id,
    url: w.target.url,
    dispatched: w.dispatched,
    ...webhookLag(Math.max(f.feed?.latest ?? 0, w.dispatched), w.settled, f.feed?.oldestUnsettledAt, f.now),
    failed: w.counts.failed,
    queued: w.counts.waiting + w.counts.active + w.counts.delayed,
    endpointFailing: w.endpoint,
    held: (f.removalGate === undefined ? undefined : describeHeldWebhooks(f.removalGate)) ?? null,
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

export function formatStatusReport(r: StatusReport): string {
  const lines: string[] = [];
  const m = r.mirror;
  lines.push(`mirror ${m.id} (${m.path})`);
  if (!m.available) {
    lines.push(`  unavailable: ${m.error ?? 'unknown error'}`);
    if (m.lastAttemptFailed != null)
      lines.push(`  LAST SYNC FAILED at ${m.lastAttemptFailed.at}: ${oneLine(m.lastAttemptFailed.reason, 300)}`);
  } else {
    lines.push(`  users         ${m.activeUsers ?? 0} active, ${m.deletedUsers ?? 0} deleted`);
    const age =
      m.ageSeconds === null || m.ageSeconds === undefined
        ? 'never synced successfully'
        : `${formatAge(m.ageSeconds)} ago (${m.lastSucceededAt ?? ''})`;
    lines.push(`  last success  ${age}`);
    if (m.stale === true) lines.push(`  STALE         ${oneLine(m.staleReason ?? 'no succeeded sync', 400)}`);
    const failed = m.lastAttemptFailed;
    if (failed !== null && failed !== undefined) {
      const which = failed.run === null ? 'LAST SYNC FAILED (no run recorded)' : `LAST SYNC FAILED (run #${failed.run})`;
      lines.push(`  ${which} at ${failed.at}: ${oneLine(failed.reason, 300)}`);
    }
    if (m.checkpointFailed != null) {
      lines.push(
        `  CHECKPOINT FAILED at ${m.checkpointFailed.at}: ${oneLine(m.checkpointFailed.reason, 300)} ` +
          '(the WAL keeps growing until one succeeds; each sync retries it first)',
      );
    }
    if (m.wal !== undefined) {
      const ratio = m.wal.mirrorBytes > 0 ? ` (${(m.wal.walBytes / m.wal.mirrorBytes).toFixed(1)}× the mirror)` : '';
      lines.push(
        m.wal.tooLarge
          ? `  WAL TOO LARGE ${formatBytes(m.wal.walBytes)}${ratio}, above ${formatBytes(m.wal.warnAtBytes)} (MIRROR_WAL_WARN_BYTES): ` +
              'a read transaction held open (an analytics session, a lingering reader) keeps every checkpoint from finishing; end it (docs/sql.md)'
          : `  wal           ${formatBytes(m.wal.walBytes)}${ratio}`,
      );
    }
    if (m.wal !== undefined) {
      const free = m.freeBytes === undefined ? '' : `, ${formatBytes(m.freeBytes)} of it free pages that later syncs reuse`;
      lines.push(`  file          ${formatBytes(m.wal.mirrorBytes)}${free}`);
    }
    const cp = m.lastCheckpoint;
    if (cp !== undefined && cp.walFrames > cp.copiedFrames) {
      lines.push(
        `  checkpoint    ${cp.walFrames - cp.copiedFrames} of ${cp.walFrames} WAL frames held back by a reader at ${cp.at} (a long read transaction; docs/sql.md)`,
      );
    }
    if (m.fieldWarnings !== null && m.fieldWarnings !== undefined) lines.push(`  field warnings ${formatWarnings(m.fieldWarnings)}`);
    const runs = m.lastRuns ?? [];
    if (runs.length === 0) lines.push('  runs          none yet');
    else {
      lines.push('  last runs');
      for (const run of runs) {
        const took =
          run.finishedAt === null ? 'running' : formatAge(Math.round((Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000));
        const changes = `+${run.created} ~${run.updated} -${run.deleted}${formatMissing(run.candidates)}`;
        const error = run.error === null ? '' : `  ${oneLine(run.error)}`;
        lines.push(
          `    #${String(run.id).padEnd(5)} ${run.status.padEnd(9)} ${run.startedAt}  ${took.padEnd(8)} seen ${run.usersSeen}  ${changes}${error}`,
        );
        const anomalies = formatAnomalies(run);
        if (anomalies !== '') lines.push(`           ANOMALIES ${anomalies}`);
      }
    }
  }
  if (r.queues.reachable) {
    lines.push('queues');
    lines.push(`  sync          ${formatCounts(r.queues.sync)}`);
    const removals = r.queues.removals;
    if (removals === null) lines.push('  removals      not shown: MANAGEMENT_URL is unset (it names the queue)');
    else {
      lines.push(`  removals      ${formatCounts(removals.counts)}   (all hosts; target ${removals.target.id}, ${removals.target.url})`);
      for (const h of removals.hosts) {
        lines.push(
          `    ${h.host.padEnd(20)} ${Object.entries(h.outcomes)
            .map(([s, n]) => `${s} ${n}`)
            .join(', ')}  (recent; in that host's audit)`,
        );
      }
    }
    if (r.queues.unboundRemovals > 0) {
      lines.push(
        `  UNBOUND       ${r.queues.unboundRemovals} removal(s) name no target and are taken by no worker: run 'user-mirror removals adopt --all' where MANAGEMENT_URL is their target`,
      );
    }
  } else {
    lines.push(`queues: redis unreachable (${oneLine(r.queues.error)}); queue depths unknown`);
  }
  const failed = [
    r.failedRemovals.queue === null ? undefined : `${r.failedRemovals.queue} in the queue`,
    r.failedRemovals.audit === null ? undefined : `${r.failedRemovals.audit} in the audit`,
  ].filter((x): x is string => x !== undefined);
  lines.push(
    `failed removals ${failed.length === 0 ? 'unknown' : failed.join(', ')}${r.failedRemovals.audit === null ? '' : " (this host's audit)"}`,
  );
  if (r.removalQueue !== null) lines.push(...formatRemovalQueue(r.removalQueue));
  if (r.changeFeed !== null) {
    const f = r.changeFeed;
    lines.push(
      `change feed     latest cursor ${f.latest}, oldest held ${f.oldest ?? 'none'}${f.prunedThrough > 0 ? ` (retention dropped up to ${f.prunedThrough})` : ''}`,
    );
  }
  const w = r.webhooks;
  if (w !== null) {
    const behind = w.eventsBehind === 0 ? 'caught up' : `BEHIND ${w.eventsBehind} events (${formatAge(w.secondsBehind)})`;
    lines.push(
      `webhooks        ${behind}, ${w.failed} failed${w.failed > 0 ? " ('user-mirror webhooks --failed')" : ''}   (target ${w.target}, ${w.url})`,
    );
    if (w.endpointFailing !== null) {
      lines.push(
        `webhooks        ENDPOINT FAILING since ${w.endpointFailing.since} (${w.endpointFailing.last}): every event held, none lost; fix WEBHOOK_URL or the receiver`,
      );
    }
    if (w.held !== null) lines.push(`webhooks        HELD: the daemon queues no delivery on this Redis: ${w.held}`);
  } else if (r.webhooksConfigured) lines.push('webhooks        unknown: redis unreachable');
  return `${lines.join('\n')}\n`;
}

function formatRemovalQueue(q: RemovalQueueReport): string[] {
  const settings = `appendonly ${q.redis.appendonly}, appendfsync ${q.redis.appendfsync}, maxmemory-policy ${q.redis.maxmemoryPolicy}`;
  const verdict =
    q.state === 'held'
      ? 'HELD: a removal worker takes no job from this Redis'
      : q.volatileAllowed
        ? 'running on a volatile Redis (ALLOW_VOLATILE_REDIS=1)'
        : 'durable';
  const lines = [`removal queue   ${verdict}`, `  redis         ${settings}`];
  for (const reason of q.reasons) lines.push(`  why           ${reason}`);
  for (const warning of q.warnings) lines.push(`  warning       ${warning}`);
  if (q.state === 'held' && q.fix !== undefined) lines.push(`  fix           ${q.fix}`);
  return lines;
}

/** What the run's listing did wrong, one phrase each; '' when nothing. */
function formatAnomalies(run: Pick<RunFacts, 'anomalies' | 'totalAtStart'>): string {
  const a = run.anomalies;
  const parts = [
    a.identityConflicts > 0
      ? `${a.identityConflicts} identity conflict(s) (the later listing won; ids in the sync.identity_conflict log lines)`
      : '',
    a.oversizePages > 0 ? `${a.oversizePages} page(s) larger than the limit asked` : '',
    a.totalLowest !== null && run.totalAtStart !== null && a.totalLowest < run.totalAtStart
      ? `total fell from ${run.totalAtStart} to ${a.totalLowest} during the scan`
      : '',
  ].filter((p) => p !== '');
  return parts.join('; ');
}

/** Only confirmed users are deleted: say what became of the others. */
function formatMissing(c: CandidateCounts): string {
  if (c.candidates === 0) return '';
  const open = [c.unverified > 0 ? `${c.unverified} unchecked` : '', c.deferred > 0 ? `${c.deferred} deferred` : ''].filter(
    (x) => x !== '',
  );
  return `  missing ${c.candidates} (${c.confirmedGone} gone, ${c.stillThere} still there${open.length > 0 ? `, ${open.join(', ')}` : ''})`;
}

function formatWarnings(w: { usersWithWarnings: number; topFields: Array<{ field: string; count: number }> }): string {
  if (w.usersWithWarnings === 0) return 'none';
  const top = w.topFields.map((f) => `${f.field} ${f.count}`).join(', ');
  return `${w.usersWithWarnings} users (${top})`;
}

function formatCounts(c: QueueCounts): string {
  return `waiting ${c.waiting}  active ${c.active}  delayed ${c.delayed}  failed ${c.failed}  completed ${c.completed}`;
}

/**
 * `status`'s exit code: 0 when nothing needs attention; 1 when something
 * does: the mirror is unreadable or stale, its last sync attempt failed (lastFailedAttempt), its
 * last checkpoint failed, or its WAL is too large (walVerdict); and where removals are
 * configured (MANAGEMENT_URL), Redis is unreachable (the queue, and so the
 * removals, are out of sight), removals are held, or some wait in the queue
 * no worker takes; where webhooks are configured (WEBHOOK_URL), Redis is
 * unreachable, its endpoint fails, or the Redis can lose jobs (deliveries held either way). A webhook's lag and
 * failed events are shown, not judged (like failed removals: the operator's
 * to-do list). A sync-only estate needs no Redis: it is shown, not judged.
 */
export function statusExitCode(r: StatusReport): 0 | 1 {
  const mirrorOk =
    r.mirror.available &&
    r.mirror.stale !== true &&
    r.mirror.wal?.tooLarge !== true &&
    (r.mirror.lastAttemptFailed ?? null) === null &&
    (r.mirror.checkpointFailed ?? null) === null;
  if (!r.removalsConfigured && !r.webhooksConfigured) return mirrorOk ? 0 : 1;
  if (r.webhooks?.endpointFailing != null || r.webhooks?.held != null) return 1;
  if (!r.removalsConfigured) return mirrorOk && r.queues.reachable ? 0 : 1;
  const removalsHeld = r.removalQueue?.state === 'held';
  const unbound = r.queues.reachable && r.queues.unboundRemovals > 0;
  const healthy = mirrorOk && r.queues.reachable && !removalsHeld && !unbound;
  return healthy ? 0 : 1;
}
