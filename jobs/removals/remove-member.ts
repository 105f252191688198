/**
 * The `remove-member` processor: one run of a removal job, from its payload
 * to its audit row. It checks the job (`checkRemovalJob`: is this payload
 * safe to act on, and for this worker's target?), writes the audit's
 * `started` row, sends the DELETE, and turns what came back into the job's
 * end: done, already absent, retried with backoff, failed for good, or the
 * whole queue paused on a 429 (`classifyRemovalFailure`, the pure rule
 * below, decides which). A DELETE whose audit write then fails is kept with
 * the job (its progress) so its next run only writes the audit. Each end is
 * logged, counted (`onOutcome`) and traced.
 *
 * Order matters: the payload is validated before any I/O, so a malformed
 * job can never become a request for some other member; the audit row is
 * written before the DELETE, so no removal happens unrecorded.
 */
import { hostname } from 'node:os';
import { type Job, UnrecoverableError, Worker } from 'bullmq';
import type { DeleteMemberResult } from '../../src/service/client.js';
import { logError } from '../../src/runtime/log-error.js';
import { errorMessage, MESSAGE_MAX_CHARS } from '../../src/runtime/line-text.js';
import { isRecord } from '../../src/runtime/is-record.js';
import type { RemovalAuditWriter, RemovalJobRef } from '../../db/removal-audit.js';
import { checkRemovalJob, type ManagementTarget, type RemovalResult } from './contract.js';
import { HttpError, RequestValidationError, ResponseValidationError } from '../../src/service/errors.js';
import { backoffDelay, isRetryable, retryAfterOf, type BackoffPolicy } from '../../src/service/retry.js';
import { removalBackoffPolicy } from './backoff.js';
import type { Logger } from 'pino';
import { traceAudit, traceDelete } from './removal-spans.js';

/** The one call a removal needs; `ServiceClient` satisfies it. */
export interface MemberRemover {
  deleteOrgMember(orgId: string, memberId: string, signal?: AbortSignal): Promise<DeleteMemberResult>;
}

/**
 * What happened to one run of a job, for metrics:
 * succeeded / already_absent / failed are final; retrying and rate_limited
 * mean the job will run again.
 */
export type RemovalOutcome = 'succeeded' | 'already_absent' | 'failed' | 'retrying' | 'rate_limited';

export interface RemoveMemberDeps {
  client: MemberRemover;
  /** The management service `client` talks to: a job for any other is failed, never performed. */
  target: ManagementTarget;
  audit: RemovalAuditWriter | undefined;
  logger: Logger;
  /** Pauses the whole queue for `ms` (the worker's `rateLimit`). */
  rateLimit: (ms: number) => Promise<void>;
  /** Base of the rate-limit wait when a 429 carries no Retry-After (REMOVAL_BACKOFF_MS). */
  backoffBaseMs: number;
  onOutcome?: ((outcome: RemovalOutcome) => void) | undefined;
  random?: () => number;
}

export type RemovalJob = Job<unknown, RemovalResult, string>;

export interface RemoveMemberProcessor {
  process: (job: RemovalJob, token?: string, signal?: AbortSignal) => Promise<RemovalResult>;
  /** Whether the processor already audited and counted this error (the worker's `failed` event must not do it twice). */
  handled: (err: Error) => boolean;
}

export function createRemoveMemberProcessor(deps: RemoveMemberDeps): RemoveMemberProcessor {
  const handledErrors = new WeakSet<Error>();
  const policy = removalBackoffPolicy(deps.backoffBaseMs);

  const audit = async (what: string, write: () => Promise<void> | undefined, mustSucceed: boolean): Promise<void> => {
    try {
      await traceAudit(what, async () => write());
    } catch (err) {
      logError(deps.logger, 'error', { err, audit: what }, 'removal audit write failed');
      if (mustSucceed) throw err;
    }
  };

  async function process(job: RemovalJob, _token?: string, signal?: AbortSignal): Promise<RemovalResult> {
    const ref = jobRef(job);
    const checked = checkRemovalJob(job.name, job.data, deps.target);
    if (!checked.ok) {
      const wrongTarget = 'wrongTarget' in checked;
      const reason = wrongTarget ? checked.reason : `invalid payload: ${checked.reason}`;
      const fields = isRecord(job.data) ? job.data : {};
      await audit(
        'rejected',
        () => deps.audit?.rejected(ref, { target: deps.target.id, org_id: fields.org_id, member_id: fields.member_id }, reason),
        false,
      );
      // A job for another target is a routing or producer bug that may leave someone's access in place: loud.
      deps.logger[wrongTarget ? 'error' : 'warn'](
        { event: wrongTarget ? 'removal.wrong_target' : 'removal.rejected', jobId: job.id, reason },
        'removal job rejected',
      );
      return fail(new UnrecoverableError(reason), 'failed');
    }
    const { org_id, member_id, requested_by, reason } = checked.payload;
    // A DELETE this job already performed (its audit write failed after it): only the audit is left to do.
    const performed = performedOf(job.progress);
    if (performed !== undefined) {
      deps.logger.info(
        { event: 'removal.audit_resumed', jobId: job.id, org_id, member_id, status: performed },
        'recording a removal already performed',
      );
      return finish(job, ref, performed, org_id, member_id);
    }
    // If this write fails the job is retried later rather than deleting unaudited.
    await audit('started', () => deps.audit?.started(ref, { target: deps.target.id, org_id, member_id, requested_by, reason }), true);

    let result: DeleteMemberResult;
    try {
      result = await traceDelete(deps.target.url, () => deps.client.deleteOrgMember(org_id, member_id, signal));
    } catch (err) {
      const decision = classifyRemovalFailure(err, {
        rateLimitedRuns: rateLimitedRuns(job),
        policy,
        ...(deps.random ? { random: deps.random } : {}),
      });
      const log = { jobId: job.id, org_id, member_id, attempt: job.attemptsMade + 1, reason: decision.reason };
      if (decision.kind === 'rate_limited') {
        // Pause first: every millisecond before the limit is set lets other jobs hit the service too.
        await deps.rateLimit(decision.waitMs);
        deps.logger.info({ ...log, waitMs: decision.waitMs }, 'removal rate limited; pausing the queue');
        deps.onOutcome?.('rate_limited');
        await audit('rate_limited', () => deps.audit?.attemptFailed(ref, decision.reason, false), false);
        throw Worker.RateLimitError();
      }
      if (decision.kind === 'final') {
        deps.logger.warn({ event: 'removal.failed', ...log }, 'removal failed permanently');
        await audit('failed', () => deps.audit?.attemptFailed(ref, decision.reason, true), false);
        return fail(new UnrecoverableError(decision.reason), 'failed');
      }
      const last = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      deps.logger[last ? 'warn' : 'info'](
        { event: last ? 'removal.failed' : 'removal.retrying', ...log },
        last ? 'removal failed; no attempts left' : 'removal attempt failed; will retry',
      );
      await audit('attempt_failed', () => deps.audit?.attemptFailed(ref, decision.reason, last), false);
      // The original error goes back to BullMQ: the backoff strategy reads its Retry-After.
      return fail(err instanceof Error ? err : new Error(decision.reason), last ? 'failed' : 'retrying');
    }

    const status = result.outcome === 'deleted' ? 'succeeded' : 'already_absent';
    return finish(job, ref, status, org_id, member_id);
  }

  /**
   * Records a performed removal in the audit. A row left `requested` for a member who is gone
   * would be a wrong audit: the writer has already retried a busy file for its budget; if it still
   * fails (a full disk, a lock held for minutes), the outcome is kept with the job (its progress),
   * the queue pauses and the job runs again later: that run finds the outcome (`performedOf`) and
   * only writes the audit, instead of deleting again and recording the 404 of its own removal as
   * `already_absent`; no attempt is burnt. Kept only on this path: no Redis call for the usual removal.
   */
  async function finish(
    job: RemovalJob,
    ref: RemovalJobRef,
    status: 'succeeded' | 'already_absent',
    org_id: string,
    member_id: string,
  ): Promise<RemovalResult> {
    try {
      await traceAudit('finished', async () => deps.audit?.finished(ref, status));
    } catch (err) {
      await job.updateProgress({ performed: status } satisfies PerformedProgress).catch((kept: unknown) => {
        logError(
          deps.logger,
          'error',
          { event: 'removal.outcome_unkept', jobId: job.id, err: kept },
          'could not keep the outcome with the job',
        );
      });
      const waitMs = backoffDelay(rateLimitedRuns(job) + 1, policy, undefined, deps.random);
      logError(
        deps.logger,
        'error',
        { event: 'removal.audit_pending', jobId: job.id, org_id, member_id, status, waitMs, err },
        'removal performed but its audit write failed; the queue pauses and the audit is written on the next run',
      );
      await deps.rateLimit(waitMs);
      throw Worker.RateLimitError();
    }
    deps.logger.info(
      { event: 'removal.done', jobId: job.id, org_id, member_id, status },
      status === 'succeeded' ? 'member removed' : 'member was already absent',
    );
    deps.onOutcome?.(status);
    return { status, org_id, member_id, target: deps.target.id, host: HOST };
  }

  function fail(err: Error, outcome: RemovalOutcome): never {
    handledErrors.add(err);
    deps.onOutcome?.(outcome);
    throw err;
  }

  return { process, handled: (err) => handledErrors.has(err) };
}

/** The host in results: which host's audit file holds the job's row. */
const HOST = hostname();

export function jobRef(job: Pick<RemovalJob, 'id' | 'timestamp'>): RemovalJobRef {
  // A hand-written job hash may lack its timestamp: the audit key must still be a number.
  return { jobId: job.id ?? '(no id)', enqueuedAt: Number.isFinite(job.timestamp) ? job.timestamp : 0 };
}

/** What a job keeps in its progress once its DELETE has an answer. */
interface PerformedProgress {
  performed: 'succeeded' | 'already_absent';
}

/** The outcome an earlier run of this job performed, or undefined (none, or progress from elsewhere). */
function performedOf(progress: unknown): PerformedProgress['performed'] | undefined {
  if (!isRecord(progress)) return undefined;
  const p = progress.performed;
  return p === 'succeeded' || p === 'already_absent' ? p : undefined;
}

/**
 * Runs of this job that ended without BullMQ counting an attempt: rate
 * limits and stalls. Stalls are counted separately, so the rest are rate limits.
 */
function rateLimitedRuns(job: RemovalJob): number {
  return Math.max(0, job.attemptsStarted - 1 - job.attemptsMade - job.stalledCounter);
}

/**
 * What a failed removal attempt means, decided in one pure function so the
 * rules can be tested without Redis or a service.
 *
 *   429 (within budget)   rate_limited: pause the whole queue, do not burn an attempt
 *   408, 429, 5xx, network, timeouts, unparsable 2xx
 *                         retry: BullMQ backs off (the `removal` backoff type) and tries again
 *   401, 403, 422, other 4xx, a request we refused to send
 *                         final: fail now, with the service's `detail` in the reason
 *
 * And how long a retry waits: the `removal` backoff type (./backoff.ts).
 */
export type FailureDecision =
  { kind: 'rate_limited'; waitMs: number; reason: string } | { kind: 'retry'; reason: string } | { kind: 'final'; reason: string };

/**
 * A 429 that keeps coming must not keep a job alive forever without ever
 * counting: after this many rate-limited runs a 429 burns attempts like a 503.
 */
export const MAX_RATE_LIMITED_RUNS = 50;

export interface FailureContext {
  /** Runs of this job that ended in a rate limit so far (not counting this one). */
  rateLimitedRuns: number;
  policy: BackoffPolicy;
  random?: () => number;
}

export function classifyRemovalFailure(err: unknown, ctx: FailureContext): FailureDecision {
  // One line; HttpError messages already carry method, path, status and `detail`.
  const reason = errorMessage(err, MESSAGE_MAX_CHARS);
  if (err instanceof HttpError && err.status === 429 && ctx.rateLimitedRuns < MAX_RATE_LIMITED_RUNS) {
    return { kind: 'rate_limited', waitMs: rateLimitWait(err, ctx), reason };
  }
  if (isRetryable(err)) return { kind: 'retry', reason };
  // A 2xx we could not parse still removed the member; the retry will see a
  // 404 and finish as already_absent.
  if (err instanceof ResponseValidationError) return { kind: 'retry', reason };
  if (err instanceof HttpError || err instanceof RequestValidationError) {
    return { kind: 'final', reason: `permanent failure, not retried: ${reason}` };
  }
  // Unknown errors (a bug, an abort) are retried: a removal is idempotent and
  // attempts are bounded, whereas failing here could strand a valid request.
  return { kind: 'retry', reason };
}

/** The server's Retry-After when it sent one (capped), else our own backoff for this streak. */
function rateLimitWait(err: unknown, ctx: FailureContext): number {
  return backoffDelay(ctx.rateLimitedRuns + 1, ctx.policy, retryAfterOf(err), ctx.random);
}
