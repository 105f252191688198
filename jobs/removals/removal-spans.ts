/**
 * A removal's trace (docs/tracing.md): the enqueue (a producer
 * span, whose context rides in the job's `opts.telemetry.metadata`, where
 * bullmq-otel puts it too), one consumer span per attempt under it (retries
 * included: every attempt reads the same carrier), and in each attempt the
 * audit writes and the DELETE. Attributes are ids of jobs and hosts, counts,
 * outcomes: never a member, an org, a requester, a reason or a key.
 *
 * With tracing off (src/runtime/tracing.ts) each of these only runs its function.
 */
import type { Job, JobsOptions } from 'bullmq';
import { startTracing, traceCarrier, withSpan } from '../../src/runtime/tracing.js';
import { HttpError } from '../../src/service/errors.js';
import type { DeleteMemberResult } from '../../src/service/client.js';

interface Enqueue<P> {
  jobId: string;
  payload: P;
  opts: JobsOptions;
}

/** Runs the enqueue inside a producer span, each job carrying the span's context. */
export async function traceEnqueue<P, R>(queueName: string, jobs: Enqueue<P>[], add: (jobs: Enqueue<P>[]) => Promise<R>): Promise<R> {
  // The producer library inside another service joins that service's provider; the CLI has started its own.
  await startTracing(process.env, { register: false });
  return withSpan(
    `${queueName} publish`,
    {
      kind: 'producer',
      attributes: { 'messaging.system': 'bullmq', 'messaging.destination.name': queueName, 'messaging.batch.message_count': jobs.length },
    },
    async (span) => {
      const metadata = traceCarrier();
      if (jobs.length === 1 && jobs[0] !== undefined) span.setAttributes({ 'messaging.message.id': jobs[0].jobId });
      return add(metadata === undefined ? jobs : jobs.map((j) => ({ ...j, opts: { ...j.opts, telemetry: { metadata } } })));
    },
  );
}

/** One attempt of a job, a consumer span in the producer's trace (a job without a valid carrier starts its own). */
export function traceAttempt<T>(queueName: string, job: Pick<Job, 'id' | 'opts' | 'attemptsMade'>, run: () => Promise<T>): Promise<T> {
  return withSpan(
    `${queueName} process`,
    {
      kind: 'consumer',
      parent: job.opts.telemetry?.metadata,
      attributes: {
        'messaging.system': 'bullmq',
        'messaging.destination.name': queueName,
        'messaging.message.id': job.id ?? '',
        'user_mirror.attempt': job.attemptsMade + 1,
      },
    },
    run,
  );
}

/** The DELETE: method, host of the management URL (no path: it holds the member's ids), status. */
export function traceDelete(managementUrl: string, run: () => Promise<DeleteMemberResult>): Promise<DeleteMemberResult> {
  const host = new URL(managementUrl).host;
  return withSpan('DELETE', { kind: 'client', attributes: { 'http.request.method': 'DELETE', 'server.address': host } }, async (span) => {
    try {
      const result = await run();
      span.setAttributes({
        'user_mirror.outcome': result.outcome,
        ...(result.outcome === 'not_found' ? { 'http.response.status_code': 404 } : {}),
      });
      return result;
    } catch (err) {
      if (err instanceof HttpError) span.setAttributes({ 'http.response.status_code': err.status });
      throw err;
    }
  });
}

/** An audit write (`started`, `finished`, `attempt_failed`…): the kind of row, nothing of its content. */
export function traceAudit<T>(what: string, run: () => Promise<T>): Promise<T> {
  return withSpan('removal audit', { attributes: { 'user_mirror.audit': what } }, run);
}
