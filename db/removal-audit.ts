/**
 * The member-removal audit trail (table `member_removals`), in its own file
 * (AUDIT_DB, db/open-audit.ts; audit migration 1).
 *
 * Written only by the removal worker: a row appears when a worker first runs
 * the job (so producers need no database), and each later run or outcome
 * updates it. Statements are prepared once. The worker writes through
 * `groupCommittedAudit`, so concurrent jobs share transactions.
 *
 * Status only moves forward: requested -> succeeded | already_absent | failed.
 * A manual retry of a failed job moves it back to requested. A re-run of a
 * job that already succeeded (a worker crashed after the delete but before
 * BullMQ recorded it) keeps `succeeded`: the re-run's 404 is not news.
 */
import type { Db } from './open.js';
import { hasTable } from './has-table.js';
import { createGroupCommit, type TransactionRunner } from './group-commit.js';
import { retryWhileBusy, type BusyRetryOptions } from './busy-retry.js';

type RemovalStatus = 'requested' | 'succeeded' | 'already_absent' | 'failed';

/** One job: BullMQ ids restart with a new Redis, the pair does not. */
export interface RemovalJobRef {
  jobId: string;
  /** `job.timestamp`, ms since the epoch. */
  enqueuedAt: number;
}

interface AuditedRequest {
  /** The target of the worker that handles the job (see audit migration 2). */
  target: string;
  org_id: string;
  member_id: string;
  requested_by?: string | undefined;
  reason?: string | undefined;
}

export interface RemovalAuditRow {
  job_id: string;
  enqueued_at: number;
  /** NULL on rows from before removals named their target. */
  target: string | null;
  org_id: string | null;
  member_id: string | null;
  status: RemovalStatus;
  attempts: number;
  requests: number;
  requested_by: string | null;
  reason: string | null;
  last_error: string | null;
  requested_at: string;
  started_at: string | null;
  finished_at: string | null;
  updated_at: string;
}

export interface RemovalAudit {
  /** A worker starts a run of the job: creates the row, or counts one more attempt. */
  started(ref: RemovalJobRef, request: AuditedRequest, now?: Date): void;
  /** The member is gone (`succeeded`: we deleted it; `already_absent`: the service said 404). */
  finished(ref: RemovalJobRef, status: 'succeeded' | 'already_absent', now?: Date): void;
  /** An attempt failed; `final` when no retry follows. */
  attemptFailed(ref: RemovalJobRef, error: string, final: boolean, now?: Date): void;
  /** A job whose payload is invalid: recorded as failed without ever becoming `requested`. */
  rejected(ref: RemovalJobRef, fields: { target: string; org_id?: unknown; member_id?: unknown }, error: string, now?: Date): void;
  /**
   * A request collapsed into pending job `jobId`. Idempotent per `eventId`
   * (the Redis stream id), so several workers may report the same event.
   * Returns whether it was new.
   */
  duplicate(eventId: string, jobId: string, dedupId: string, now?: Date): boolean;
  /** The latest row for a job id. */
  get(jobId: string): RemovalAuditRow | undefined;
  list(filter?: { status?: RemovalStatus; orgId?: string; memberId?: string; limit?: number }): RemovalAuditRow[];
  /** Runs `body` in one transaction (see group-commit.ts). */
  transaction: TransactionRunner;
}

/** The writes one run of a job makes; each resolves once committed. */
export interface RemovalAuditWriter {
  started(ref: RemovalJobRef, request: AuditedRequest): Promise<void>;
  finished(ref: RemovalJobRef, status: 'succeeded' | 'already_absent'): Promise<void>;
  attemptFailed(ref: RemovalJobRef, error: string, final: boolean): Promise<void>;
  rejected(ref: RemovalJobRef, fields: { target: string; org_id?: unknown; member_id?: unknown }, error: string): Promise<void>;
  /** Commits what is pending (shutdown). */
  flush(): void;
}

/** The audit's rows by status (`{ failed: 2, succeeded: 40 }`); undefined for a file without the table (none requested yet). */
export function removalCountsByStatus(db: Db): Record<string, number> | undefined {
  if (!hasTable(db, 'member_removals')) return undefined;
  const rows = db
    .prepare<[], { status: string; n: number }>('SELECT status, count(*) AS n FROM member_removals GROUP BY status ORDER BY status')
    .all();
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/**
 * The audit as the worker writes it: concurrent jobs' writes share
 * transactions (group commit). Timestamps are taken when a write is
 * submitted, not when its batch commits. A write that finds the file busy is
 * submitted again with backoff (busy-retry.ts) until it lands or `busy`'s
 * budget runs out; only then does its promise reject.
 */
export function groupCommittedAudit(audit: RemovalAudit, busy: BusyRetryOptions = {}): RemovalAuditWriter {
  const group = createGroupCommit(audit.transaction);
  const submit = (write: () => void): Promise<void> => retryWhileBusy(() => group.submit(write), busy);
  return {
    started: (ref, request) => {
      const now = new Date();
      return submit(() => audit.started(ref, request, now));
    },
    finished: (ref, status) => {
      const now = new Date();
      return submit(() => audit.finished(ref, status, now));
    },
    attemptFailed: (ref, error, final) => {
      const now = new Date();
      return submit(() => audit.attemptFailed(ref, error, final, now));
    },
    rejected: (ref, fields, error) => {
      const now = new Date();
      return submit(() => audit.rejected(ref, fields, error, now));
    },
    flush: () => group.flush(),
  };
}

/** Stored ids of a rejected payload: enough to recognise it, never a megabyte. */
const MAX_REJECTED_FIELD = 100;

export function createRemovalAudit(db: Db): RemovalAudit {
  const insertStarted = db.prepare<{
    job_id: string;
    enqueued_at: number;
    target: string;
    org_id: string;
    member_id: string;
    requested_by: string | null;
    reason: string | null;
    requested_at: string;
    now: string;
  }>(`
    INSERT INTO member_removals
      (job_id, enqueued_at, target, org_id, member_id, status, attempts, requests, requested_by, reason,
       requested_at, started_at, updated_at)
    VALUES
      (@job_id, @enqueued_at, @target, @org_id, @member_id, 'requested', 1,
       1 + (SELECT count(*) FROM member_removal_duplicates d WHERE d.job_id = @job_id AND d.seen_at >= @requested_at),
       @requested_by, @reason, @requested_at, @now, @now)
    ON CONFLICT (job_id, enqueued_at) DO UPDATE SET
      attempts    = attempts + 1,
      status      = CASE WHEN status = 'failed' THEN 'requested' ELSE status END,
      finished_at = CASE WHEN status = 'failed' THEN NULL ELSE finished_at END,
      started_at  = @now,
      updated_at  = @now`);

  const updateFinished = db.prepare<{ job_id: string; enqueued_at: number; status: string; now: string }>(`
    UPDATE member_removals SET
      status      = CASE WHEN status = 'succeeded' THEN 'succeeded' ELSE @status END,
      finished_at = CASE WHEN status = 'succeeded' THEN finished_at ELSE @now END,
      updated_at  = @now
    WHERE job_id = @job_id AND enqueued_at = @enqueued_at`);

  const updateFailed = db.prepare<{ job_id: string; enqueued_at: number; error: string; final: number; now: string }>(`
    UPDATE member_removals SET
      last_error  = @error,
      status      = CASE WHEN @final = 1 AND status = 'requested' THEN 'failed' ELSE status END,
      finished_at = CASE WHEN @final = 1 AND status = 'requested' THEN @now ELSE finished_at END,
      updated_at  = @now
    WHERE job_id = @job_id AND enqueued_at = @enqueued_at`);

  const insertRejected = db.prepare<{
    job_id: string;
    enqueued_at: number;
    target: string;
    org_id: string | null;
    member_id: string | null;
    error: string;
    requested_at: string;
    now: string;
  }>(`
    INSERT INTO member_removals
      (job_id, enqueued_at, target, org_id, member_id, status, attempts, requests, last_error,
       requested_at, started_at, finished_at, updated_at)
    VALUES
      (@job_id, @enqueued_at, @target, @org_id, @member_id, 'failed', 1, 1, @error, @requested_at, @now, @now, @now)
    ON CONFLICT (job_id, enqueued_at) DO UPDATE SET
      attempts = attempts + 1, last_error = @error, started_at = @now, updated_at = @now`);

  const insertDuplicate = db.prepare<{ event_id: string; job_id: string; dedup_id: string; now: string }>(`
    INSERT INTO member_removal_duplicates (event_id, job_id, dedup_id, seen_at)
    VALUES (@event_id, @job_id, @dedup_id, @now)
    ON CONFLICT DO NOTHING`);

  // The job's row, if a worker has already created it; otherwise `started`
  // counts this duplicate when it does.
  const countDuplicate = db.prepare<{ job_id: string; now: string }>(`
    UPDATE member_removals SET requests = requests + 1, updated_at = @now
    WHERE id = (SELECT max(id) FROM member_removals WHERE job_id = @job_id)`);

  const selectLatest = db.prepare<[string], RemovalAuditRow>(`
    SELECT ${COLUMNS} FROM member_removals WHERE job_id = ? ORDER BY id DESC LIMIT 1`);

  const duplicate = db.transaction((eventId: string, jobId: string, dedupId: string, now: string): boolean => {
    const inserted = insertDuplicate.run({ event_id: eventId, job_id: jobId, dedup_id: dedupId, now }).changes === 1;
    if (inserted) countDuplicate.run({ job_id: jobId, now });
    return inserted;
  });

  return {
    started(ref, request, now = new Date()) {
      insertStarted.run({
        job_id: ref.jobId,
        enqueued_at: ref.enqueuedAt,
        target: request.target,
        org_id: request.org_id,
        member_id: request.member_id,
        requested_by: request.requested_by ?? null,
        reason: request.reason ?? null,
        requested_at: iso(new Date(ref.enqueuedAt)),
        now: iso(now),
      });
    },
    finished(ref, status, now = new Date()) {
      updateFinished.run({ job_id: ref.jobId, enqueued_at: ref.enqueuedAt, status, now: iso(now) });
    },
    attemptFailed(ref, error, final, now = new Date()) {
      updateFailed.run({ job_id: ref.jobId, enqueued_at: ref.enqueuedAt, error, final: final ? 1 : 0, now: iso(now) });
    },
    rejected(ref, fields, error, now = new Date()) {
      insertRejected.run({
        job_id: ref.jobId,
        enqueued_at: ref.enqueuedAt,
        target: fields.target,
        org_id: shortText(fields.org_id),
        member_id: shortText(fields.member_id),
        error,
        requested_at: iso(new Date(ref.enqueuedAt)),
        now: iso(now),
      });
    },
    duplicate(eventId, jobId, dedupId, now = new Date()) {
      return duplicate(eventId, jobId, dedupId, iso(now));
    },
    get(jobId) {
      return selectLatest.get(jobId);
    },
    list(filter = {}) {
      const where: string[] = [];
      const params: Record<string, string | number> = { limit: filter.limit ?? 1_000 };
      if (filter.status !== undefined) {
        if (!STATUSES.has(filter.status)) throw new RangeError(`unknown removal status ${JSON.stringify(filter.status)}`);
        // A literal, not a parameter: only then can SQLite use the partial index on failed rows.
        where.push(`status = '${filter.status}'`);
      }
      if (filter.orgId !== undefined) {
        where.push('org_id = @org_id');
        params.org_id = filter.orgId;
      }
      if (filter.memberId !== undefined) {
        where.push('member_id = @member_id');
        params.member_id = filter.memberId;
      }
      const sql = `SELECT ${COLUMNS} FROM member_removals ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY id DESC LIMIT @limit`;
      return db.prepare<Record<string, string | number>, RemovalAuditRow>(sql).all(params);
    },
    transaction(body) {
      db.transaction(body)();
    },
  };
}

const STATUSES: ReadonlySet<string> = new Set<RemovalStatus>(['requested', 'succeeded', 'already_absent', 'failed']);

const COLUMNS = `job_id, enqueued_at, target, org_id, member_id, status, attempts, requests, requested_by, reason,
  last_error, requested_at, started_at, finished_at, updated_at`;

function iso(d: Date): string {
  return d.toISOString();
}

function shortText(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  return value.length > MAX_REJECTED_FIELD ? `${value.slice(0, MAX_REJECTED_FIELD)}…` : value;
}
