/**
 * The webhook worker: takes the queue's events one at a time and POSTs each
 * to the receiver (post-event.ts). Used by the daemon.
 *
 * Delivery is at least once, in order: concurrency 1 gives a total order
 * (a superset of "in order per user"), and no retry ever lets a later event
 * overtake. BullMQ's own retries would move the job to `delayed` and take
 * the next one, so a retryable failure (network error, timeout, 5xx, 408,
 * 429) instead rate-limits the whole queue for the backoff and throws
 * BullMQ's RateLimitError: bullmq 6.7's moveJobFromActiveToWait RPUSHes the
 * job onto the end of `wait` that workers take from, so it is taken first
 * when the pause ends. Retryable failures are retried without end: a
 * receiver down for an hour gets everything when it comes back, and the
 * queue's depth shows the lag meanwhile. Any other answer (3xx, other 4xx)
 * fails the job for good (UnrecoverableError), kept in the failed set for
 * `user-mirror webhooks retry`; the next event then goes. Which answer is
 * which: decide-delivery.ts.
 *
 * A job left active by a worker that died is re-queued by BullMQ's stalled
 * check only once its lock expires; until then a job that finds an earlier
 * one active (earlier-jobs.ts) waits for it, the same way.
 *
 * Logs carry event ids, cursors, statuses, attempts and delays; never the
 * secret, a signature or a body.
 */
import { hostname } from 'node:os';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { logError, throttledErrorLog } from '../../src/runtime/log-error.js';
import { closeWithin } from '../../src/runtime/deadline.js';
import type { BackoffPolicy } from '../../src/service/retry.js';
import type { RedisClient } from '../redis-connection.js';
import { TolerantWorker } from '../tolerant-bullmq.js';
import { decideDelivery, WEBHOOK_BACKOFF } from './decide-delivery.js';
import { earlierJobs } from './earlier-jobs.js';
import { outcomeReport, type WebhookOutcome } from './outcomes.js';
import { eventPoster } from './post-event.js';
import {
  KEEP_COMPLETED_WEBHOOKS,
  attemptsOf,
  checkWebhookJob,
  webhookQueueName,
  type WebhookProgress,
  type WebhookTarget,
} from './contract.js';
import type { Logger } from 'pino';
import { clearEndpointFailure, markEndpointFailing, raiseSettled } from './delivery-state.js';
import { traceDelivery, tracedPoster } from './delivery-spans.js';

/** What a delivered job returns (`job.returnvalue`). */
interface WebhookResult {
  status: number;
  attempts: number;
}

export interface WebhookWorkerOptions {
  /** An ioredis client (or cluster) created in the `worker` role (see ../redis-connection.ts). */
  connection: RedisClient;
  /** QUEUE_PREFIX. */
  prefix: string;
  /** MIRROR_ID: the queue is this mirror's own. */
  mirrorId: string;
  /** `webhookTarget(WEBHOOK_URL)`. */
  target: WebhookTarget;
  /**
   * The event's body, as delivered, from the mirror's change feed
   * (ChangeFeed.body); undefined when the feed no longer holds that event.
   * Jobs carry only the cursor and id, so no end user's record waits in Redis.
   */
  eventBody: (cursor: number, eventId: string) => string | undefined;
  /** WEBHOOK_SECRET (`whsec_…`); without it requests go unsigned. */
  secret: string | undefined;
  /** WEBHOOK_TIMEOUT_MS: one attempt, connect to last byte. */
  timeoutMs: number;
  logger: Logger;
  /** Called once per attempt, for metrics. */
  onOutcome?: (outcome: WebhookOutcome) => void;
  /** Retry curve; tests shorten it. */
  backoff?: Partial<BackoffPolicy>;
  /** How long a crashed worker's job stays locked before it is re-queued (default 30 s). */
  lockDurationMs?: number;
  /**
   * How often this worker looks for jobs whose worker died (default 5 s).
   * Every later event waits for such a job, so it is looked for often; a
   * live worker's lock never lapses, so looking often never re-queues its job.
   */
  stalledIntervalMs?: number;
  /** Shown in BullMQ as the worker's name. */
  name?: string;
}

export interface WebhookWorkerHandle {
  worker: Worker<unknown, WebhookResult, string>;
  /** Resolves once the worker is connected and fetching jobs. */
  waitUntilReady(): Promise<void>;
  /**
   * Stops fetching, waits up to `timeoutMs` for the request in flight,
   * closes. `drained: false` means it was still running: its lock expires
   * and the job is delivered again (same webhook-id) by the next worker.
   */
  close(timeoutMs?: number): Promise<{ drained: boolean }>;
}

/** How often a job that found an earlier one active looks again. */
const EARLIER_ACTIVE_WAIT_MS = 1_000;
const DEFAULT_LOCK_MS = 30_000;
const DEFAULT_STALLED_CHECK_MS = 5_000;
/**
 * Stalls are not failures of the event: a worker killed mid-request stalls
 * its job, and failing the job would skip it. The count only guards against
 * a job that kills every worker that takes it.
 */
const MAX_STALLED = 1_000;

export function startWebhookWorker(options: WebhookWorkerOptions): WebhookWorkerHandle {
  const { logger, target, secret, timeoutMs } = options;
  const policy: BackoffPolicy = { ...WEBHOOK_BACKOFF, ...options.backoff };
  const lockDuration = options.lockDurationMs ?? DEFAULT_LOCK_MS;
  const queueName = webhookQueueName(options.mirrorId, target.id, target.sink);
  const poster = tracedPoster(eventPoster(target, secret, timeoutMs), target.endpoint);
  if (secret === undefined)
    logger.warn({ event: 'webhook.unsigned', target: target.id }, 'WEBHOOK_SECRET is not set: webhooks go unsigned');

  const outcomes = outcomeReport(logger, target, options.onOutcome);

  /** Records how far delivery has come (status, metrics); a lost write only overstates the lag until the next. */
  const settle = async (cursor: number): Promise<void> => {
    if (worker === undefined) return;
    await raiseSettled(options.connection, worker.toKey('settled'), cursor).catch((err: unknown) => {
      logError(logger, 'warn', { event: 'webhook.settled_unrecorded', cursor, err }, 'could not record the settled cursor');
    });
  };

  // The processor needs the worker (to rate-limit its queue) and the worker needs the processor.
  let worker: Worker<unknown, WebhookResult, string> | undefined;

  /**
   * The endpoint failed (not the event): mark it failing in Redis, for
   * status, /readyz and /metrics, and say so in the log, once when it
   * starts failing and then at error level on every attempt (few: backoff).
   */
  const endpointFailing = async (last: string, facts: { eventId: string; cursor: number; attempt: number }): Promise<void> => {
    maybeFailing = true;
    const failure =
      worker === undefined
        ? undefined
        : await markEndpointFailing(options.connection, worker.toKey('endpoint'), last, new Date()).catch(() => undefined);
    logger.error(
      { event: 'webhook.endpoint_failing', target: target.id, url: target.url, since: failure?.since, last, ...facts },
      'webhook endpoint failing (its address or set-up is wrong): every event is held, none lost; fix WEBHOOK_URL or the receiver',
    );
  };

  /** Whether the endpoint may be marked failing: at start (an earlier worker may have marked it), and after a hold. */
  let maybeFailing = true;

  /** A 2xx: the endpoint is well again, if it was failing (one Redis call, only after a hold or at start). */
  const endpointAnswered = async (): Promise<void> => {
    if (worker === undefined || !maybeFailing) return;
    const was = await clearEndpointFailure(options.connection, worker.toKey('endpoint')).then(
      (cleared) => {
        maybeFailing = false;
        return cleared;
      },
      () => false,
    );
    if (was)
      logger.info(
        { event: 'webhook.endpoint_recovered', target: target.id, url: target.url },
        'webhook endpoint answers again; held events follow in order',
      );
  };

  /** Puts the job back at the front of the queue and pauses the queue for `ms`. */
  const holdQueue = async (ms: number): Promise<never> => {
    try {
      await worker?.rateLimit(ms);
    } catch (err) {
      // Redis is away: wait here instead, so a move that does succeed is not retried at once.
      logError(logger, 'warn', { event: 'webhook.hold_failed', err }, 'could not pause the webhook queue; waiting in the worker');
      await new Promise((resolve) => setTimeout(resolve, Math.min(ms, 5_000)));
    }
    throw Worker.RateLimitError();
  };

  const processor = async (job: Job<unknown, WebhookResult, string>): Promise<WebhookResult> => {
    const checked = checkWebhookJob(job.name, job.data);
    if (!checked.ok) {
      logger.error({ event: 'webhook.invalid_job', jobId: job.id, reason: checked.reason }, 'invalid webhook job; failed, not delivered');
      outcomes.report({ outcome: 'failed', eventId: job.id, cursor: undefined, attempt: 0, ms: 0 });
      throw new UnrecoverableError(`invalid webhook job: ${checked.reason}`);
    }
    const data = checked.data;
    const earlier = await earlierJobs(options.connection, worker, job.id ?? '', data.cursor, data.replay);
    if (earlier.length > 0) {
      logger.info(
        { event: 'webhook.waiting_for_earlier', eventId: data.event_id, cursor: data.cursor, active: earlier.slice(0, 3) },
        'an earlier webhook is still active (its worker stopped?); waiting for it',
      );
      return holdQueue(EARLIER_ACTIVE_WAIT_MS);
    }

    const attempt = attemptsOf(job.progress) + 1;
    const body = data.body ?? options.eventBody(data.cursor, data.event_id);
    if (body === undefined) {
      const reason =
        "the event is no longer in the mirror's change feed (past CHANGES_RETENTION_DAYS, or the mirror was rebuilt or restored from a backup): nothing to send";
      logger.error({ event: 'webhook.event_gone', eventId: data.event_id, cursor: data.cursor, attempt }, reason);
      await settle(data.cursor);
      outcomes.report({ outcome: 'failed', eventId: data.event_id, cursor: data.cursor, attempt, ms: 0 });
      throw new UnrecoverableError(reason);
    }
    const started = Date.now();
    const decision = decideDelivery(await poster.post(data.event_id, body), attempt, policy);
    const ms = Date.now() - started;
    const facts = { eventId: data.event_id, cursor: data.cursor, attempt, ms };
    if (decision.kind === 'delivered' || decision.kind === 'fail') await settle(data.cursor);
    if (decision.kind === 'delivered') {
      await endpointAnswered();
      logger.debug({ event: 'webhook.delivered', ...facts, status: decision.status }, 'webhook delivered');
      outcomes.report({ outcome: 'delivered', ...facts, status: decision.status });
      return { status: decision.status, attempts: attempt };
    }
    if (decision.kind === 'fail') {
      logger.error(
        { event: 'webhook.failed', ...facts, status: decision.status },
        'webhook refused by the receiver; failed for good (webhooks retry re-sends it)',
      );
      await job.updateProgress({ attempts: attempt, last: `status ${decision.status}` } satisfies WebhookProgress).catch(() => undefined);
      outcomes.report({ outcome: 'failed', ...facts, status: decision.status });
      throw new UnrecoverableError(decision.reason);
    }
    if (decision.kind === 'hold') {
      await endpointFailing(decision.last, facts);
    } else {
      logger.warn(
        { event: 'webhook.retry', ...facts, status: decision.status, last: decision.last, delayMs: decision.delayMs },
        'webhook not delivered; the queue waits and retries it first',
      );
    }
    await job.updateProgress({ attempts: attempt, last: decision.last } satisfies WebhookProgress).catch((err: unknown) => {
      logError(logger, 'warn', { event: 'webhook.progress_failed', eventId: data.event_id, err }, 'could not record the attempt');
    });
    outcomes.report({ outcome: 'retrying', ...facts, status: decision.status, delayMs: decision.delayMs });
    return holdQueue(decision.delayMs);
  };

  // Tolerant: a job whose data is not JSON reaches the processor and fails once (see ../tolerant-bullmq.ts).
  worker = new TolerantWorker<unknown, WebhookResult, string>(queueName, (job) => traceDelivery(queueName, job.id, () => processor(job)), {
    connection: options.connection,
    prefix: options.prefix,
    name: options.name ?? `${hostname()}:${process.pid}`,
    concurrency: 1,
    lockDuration,
    stalledInterval: options.stalledIntervalMs ?? Math.min(lockDuration, DEFAULT_STALLED_CHECK_MS),
    maxStalledCount: MAX_STALLED,
    // BullMQ honours a manual rate limit (the retry pause) only when a limiter is configured; this one never binds.
    limiter: { max: 100_000, duration: 1_000 },
    removeOnComplete: KEEP_COMPLETED_WEBHOOKS,
  });
  worker.on('failed', (job, err) => {
    // The processor logs the failures it decides; this is BullMQ failing a job on its own (a stall limit).
    if (err instanceof UnrecoverableError || err.name === 'UnrecoverableError') return;
    logError(logger, 'error', { event: 'webhook.failed', jobId: job?.id, err }, 'webhook job failed outside delivery');
  });
  worker.on('stalled', (jobId) =>
    logger.warn({ event: 'webhook.stalled', jobId }, 'webhook job stalled (its worker stopped); re-queued first'),
  );
  worker.on('error', throttledErrorLog(logger, { event: 'webhooks.worker_error', msg: 'webhook worker error' }));
  const running = worker;

  return {
    worker: running,
    waitUntilReady: async () => {
      await running.waitUntilReady();
    },
    async close(closeMs = 25_000) {
      outcomes.stop();
      const drained = await closeWithin(running.close(), closeMs, (err) =>
        logError(logger, 'warn', { err }, 'webhook worker close failed'),
      );
      if (!drained) logger.warn({ timeoutMs: closeMs }, 'webhook in flight at shutdown timeout; it will be delivered again');
      await poster.close();
      outcomes.summarize();
      return { drained };
    },
  };
}
