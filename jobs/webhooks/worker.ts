/**
 * The webhook worker: takes the queue's events one at a time and POSTs each
 * to the receiver, signed (signature.ts). Used by the daemon.
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
 * `user-mirror webhooks retry`; the next event then goes.
 *
 * A job left active by a worker that died (or by a Redis restart under a
 * rate-limited move) is re-queued by BullMQ's stalled check, at the taking
 * end of `wait`, only once its lock expires. Until then a worker must not
 * deliver later events: a job that finds another job active waits, the same
 * way, for it. The check can run just after the stalled check moved such a
 * job to `wait` behind the one taken (`earlierJobs`): it then puts the
 * earlier job back in `active`, for the stalled check to move again while
 * the later one waits.
 *
 * Logs carry event ids, cursors, statuses, attempts and delays; never the
 * secret, a signature or a body.
 */
import { hostname } from 'node:os';
import { Agent, request } from 'undici';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { logError, throttledErrorLog, type Logger } from '../../src/runtime/log.js';
import { closeWithin } from '../../src/runtime/deadline.js';
import { backoffDelay, parseRetryAfter, type BackoffPolicy } from '../../src/service/retry.js';
import type { RedisClient } from '../redis-connection.js';
import { TolerantWorker } from '../tolerant-bullmq.js';
import {
  KEEP_COMPLETED_WEBHOOKS,
  checkWebhookJob,
  clearEndpointFailure,
  markEndpointFailing,
  raiseSettled,
  webhookQueueName,
  type WebhookJobData,
  type WebhookTarget,
} from './queue.js';
import { webhookHeaders } from './signature.js';

/** What a delivered job returns (`job.returnvalue`). */
export interface WebhookResult {
  status: number;
  attempts: number;
}

/** Kept in the job's progress while it is retried, so listings and logs can count attempts. */
export interface WebhookProgress {
  attempts: number;
  /** The last failed attempt: `status 503`, or the network error. */
  last: string;
}

export interface WebhookOutcome {
  outcome: 'delivered' | 'retrying' | 'failed';
  eventId: string | undefined;
  cursor: number | undefined;
  /** The receiver's status, when it answered. */
  status?: number;
  attempt: number;
  /** Before the next attempt (`retrying`). */
  delayMs?: number;
  /** The request's duration. */
  ms: number;
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

/** From 1 s, doubling to 60 s, jittered; a Retry-After is honoured up to 10 min. */
export const WEBHOOK_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 60_000, maxRetryAfterMs: 10 * 60_000 };
/** How often a job that found an earlier one active looks again. */
const EARLIER_ACTIVE_WAIT_MS = 1_000;
/** How often the worker logs its delivery summary. */
const SUMMARY_EVERY_MS = 60_000;
const DEFAULT_LOCK_MS = 30_000;
const DEFAULT_STALLED_CHECK_MS = 5_000;
/**
 * Stalls are not failures of the event: a worker killed mid-request stalls
 * its job, and failing the job would skip it. The count only guards against
 * a job that kills every worker that takes it.
 */
const MAX_STALLED = 1_000;

/** An attempt's result: the receiver's answer, or a network error (`endpoint`: DNS or TLS, the address or set-up is wrong). */
export type DeliveryAttempt = { status: number; retryAfter: string | undefined } | { error: string; endpoint?: boolean };

/**
 * `retry`: a passing trouble (5xx, 408, 429, timeouts, refused connections),
 * retried first after a pause. `hold`: the endpoint is wrong, not the event
 * (a redirect, 401, 403, 404, 410, any 4xx but the event's own, DNS or TLS):
 * every event waits, retried on the same schedule, and the endpoint is marked
 * failing for the operator, since failing events one by one would lose the
 * whole feed to a misconfiguration. `fail`: this event's body is refused
 * (400, 413, 422): it fails for good and the next one goes.
 */
export type DeliveryDecision =
  | { kind: 'delivered'; status: number }
  | { kind: 'retry'; delayMs: number; last: string; status?: number }
  | { kind: 'hold'; delayMs: number; last: string; status?: number }
  | { kind: 'fail'; reason: string; status: number };

/** Answers that refuse the event itself (its body); every other 4xx (and 3xx) is the endpoint's failure. */
export const EVENT_REFUSALS: ReadonlySet<number> = new Set([400, 413, 422]);

/**
 * What one attempt's result means (pure). `attempt` counts from 1. A
 * Retry-After (429, 503) is the delay itself, within [baseMs, maxRetryAfterMs]:
 * the receiver said when it can take more.
 */
export function decideDelivery(
  result: DeliveryAttempt,
  attempt: number,
  policy: BackoffPolicy,
  nowMs = Date.now(),
  random: () => number = Math.random,
): DeliveryDecision {
  if ('error' in result) {
    return {
      kind: result.endpoint === true ? 'hold' : 'retry',
      delayMs: backoffDelay(attempt, policy, undefined, random),
      last: result.error,
    };
  }
  const { status } = result;
  if (status >= 200 && status < 300) return { kind: 'delivered', status };
  if (status >= 500 || status === 429 || status === 408) {
    const asked = parseRetryAfter(result.retryAfter, nowMs);
    const delayMs =
      asked === undefined
        ? backoffDelay(attempt, policy, undefined, random)
        : Math.min(policy.maxRetryAfterMs, Math.max(policy.baseMs, asked));
    return { kind: 'retry', delayMs, last: `status ${status}`, status };
  }
  if (EVENT_REFUSALS.has(status)) {
    return { kind: 'fail', reason: `receiver refused this event (${status}); not retried (webhooks retry re-sends it)`, status };
  }
  return { kind: 'hold', delayMs: backoffDelay(attempt, policy, undefined, random), last: `status ${status}`, status };
}

export function attemptsOf(progress: unknown): number {
  if (typeof progress !== 'object' || progress === null) return 0;
  const n = (progress as Record<string, unknown>).attempts;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 0;
}

/**
 * Jobs that must be delivered before job `id` (cursor `cursor`): any other
 * active job, or an earlier event at the taking end of `wait`, moved there
 * by the stalled check between this job's take and this look. In one script,
 * so no other worker moves either meanwhile; such a job goes back to
 * `active`, lockless, where the stalled check finds it again (and re-queues
 * it in front of this one, which then waits in `wait`).
 */
const EARLIER_JOBS_LUA = `
local earlier = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if id ~= ARGV[2] then table.insert(earlier, id) end
end
if #earlier > 0 then return earlier end
local front = redis.call('LINDEX', KEYS[2], -1)
if not front then return earlier end
local raw = redis.call('HGET', ARGV[1] .. front, 'data')
if not raw then return earlier end
local ok, data = pcall(cjson.decode, raw)
if not ok or type(data) ~= 'table' or type(data.cursor) ~= 'number' or data.cursor >= tonumber(ARGV[3]) then return earlier end
redis.call('LREM', KEYS[2], 1, front)
redis.call('LPUSH', KEYS[1], front)
return { front }
`;

async function earlierJobs(
  connection: RedisClient,
  worker: Worker<unknown, WebhookResult, string> | undefined,
  id: string,
  cursor: number,
): Promise<string[]> {
  if (worker === undefined) return [];
  const found = await connection.eval(
    EARLIER_JOBS_LUA,
    2,
    worker.toKey('active'),
    worker.toKey('wait'),
    worker.toKey(''),
    id,
    String(cursor),
  );
  return Array.isArray(found) ? found.filter((x): x is string => typeof x === 'string') : [];
}

export function startWebhookWorker(options: WebhookWorkerOptions): WebhookWorkerHandle {
  const { logger, target, secret, timeoutMs } = options;
  const policy: BackoffPolicy = { ...WEBHOOK_BACKOFF, ...options.backoff };
  const lockDuration = options.lockDurationMs ?? DEFAULT_LOCK_MS;
  const queueName = webhookQueueName(options.mirrorId, target.id);
  const agent = new Agent({ headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connect: { timeout: timeoutMs } });
  if (secret === undefined)
    logger.warn({ event: 'webhook.unsigned', target: target.id }, 'WEBHOOK_SECRET is not set: webhooks go unsigned');

  /**
   * One info line a minute (and at close) counting what happened, instead of
   * one per delivered event: ~1 MB of log a minute under steady churn was
   * mostly those lines. Each delivery is still a debug line; refusals,
   * retries and endpoint failures stay warn or error lines of their own.
   */
  const tally: Record<WebhookOutcome['outcome'], number> = { delivered: 0, retrying: 0, failed: 0 };
  const summarize = (): void => {
    if (tally.delivered + tally.retrying + tally.failed === 0) return;
    logger.info(
      { event: 'webhook.summary', target: target.id, ...tally, periodMs: SUMMARY_EVERY_MS },
      `webhooks: ${tally.delivered} delivered`,
    );
    tally.delivered = tally.retrying = tally.failed = 0;
  };
  const summaryTimer = setInterval(summarize, SUMMARY_EVERY_MS);
  summaryTimer.unref();

  const report = (outcome: WebhookOutcome): void => {
    tally[outcome.outcome]++;
    try {
      options.onOutcome?.(outcome);
    } catch (err) {
      logError(logger, 'error', { err }, 'webhook outcome callback threw');
    }
  };

  const post = async (data: WebhookJobData, body: string): Promise<DeliveryAttempt> => {
    const headers = webhookHeaders(secret, data.event_id, Math.floor(Date.now() / 1000), body);
    try {
      const res = await request(target.endpoint, {
        method: 'POST',
        headers,
        body,
        dispatcher: agent,
        signal: AbortSignal.timeout(timeoutMs),
      });
      // The receiver's answer is not ours to keep or log; reading it frees the connection.
      await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
      const retryAfter = res.headers['retry-after'];
      return { status: res.statusCode, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter };
    } catch (err) {
      return networkAttempt(err, timeoutMs);
    }
  };

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
      report({ outcome: 'failed', eventId: job.id, cursor: undefined, attempt: 0, ms: 0 });
      throw new UnrecoverableError(`invalid webhook job: ${checked.reason}`);
    }
    const data = checked.data;
    const earlier = await earlierJobs(options.connection, worker, job.id ?? '', data.cursor);
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
        "the event is no longer in the mirror's change feed (past CHANGES_RETENTION_DAYS, or the mirror was rebuilt): nothing to send";
      logger.error({ event: 'webhook.event_gone', eventId: data.event_id, cursor: data.cursor, attempt }, reason);
      await settle(data.cursor);
      report({ outcome: 'failed', eventId: data.event_id, cursor: data.cursor, attempt, ms: 0 });
      throw new UnrecoverableError(reason);
    }
    const started = Date.now();
    const decision = decideDelivery(await post(data, body), attempt, policy);
    const ms = Date.now() - started;
    const facts = { eventId: data.event_id, cursor: data.cursor, attempt, ms };
    if (decision.kind === 'delivered' || decision.kind === 'fail') await settle(data.cursor);
    if (decision.kind === 'delivered') {
      await endpointAnswered();
      logger.debug({ event: 'webhook.delivered', ...facts, status: decision.status }, 'webhook delivered');
      report({ outcome: 'delivered', ...facts, status: decision.status });
      return { status: decision.status, attempts: attempt };
    }
    if (decision.kind === 'fail') {
      logger.error(
        { event: 'webhook.failed', ...facts, status: decision.status },
        'webhook refused by the receiver; failed for good (webhooks retry re-sends it)',
      );
      await job.updateProgress({ attempts: attempt, last: `status ${decision.status}` } satisfies WebhookProgress).catch(() => undefined);
      report({ outcome: 'failed', ...facts, status: decision.status });
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
    report({ outcome: 'retrying', ...facts, status: decision.status, delayMs: decision.delayMs });
    return holdQueue(decision.delayMs);
  };

  // Tolerant: a job whose data is not JSON reaches the processor and fails once (see ../tolerant-bullmq.ts).
  worker = new TolerantWorker<unknown, WebhookResult, string>(queueName, processor, {
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
      clearInterval(summaryTimer);
      const drained = await closeWithin(running.close(), closeMs, (err) =>
        logError(logger, 'warn', { err }, 'webhook worker close failed'),
      );
      if (!drained) logger.warn({ timeoutMs: closeMs }, 'webhook in flight at shutdown timeout; it will be delivered again');
      await agent.close().catch(() => undefined);
      summarize();
      return { drained };
    },
  };
}

/** DNS and TLS failures: the address or the receiver's set-up is wrong, not a passing trouble. */
const ENDPOINT_ERROR = /^(ENOTFOUND|EAI_AGAIN|ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_)/;

function networkAttempt(err: unknown, timeoutMs: number): DeliveryAttempt {
  const code = (err as { code?: unknown } | null)?.code;
  const cause = (err as { cause?: { code?: unknown } } | null)?.cause?.code;
  const endpoint = [code, cause].some((c) => typeof c === 'string' && ENDPOINT_ERROR.test(c));
  return { error: networkError(err, timeoutMs), endpoint };
}

/** A network failure in one line, without the URL (its query may carry the receiver's token). */
function networkError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `no answer within ${timeoutMs} ms`;
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e.code === 'string' ? e.code : 'network error';
  const message = typeof e.message === 'string' ? e.message.replace(/https?:\/\/\S+/g, '(url)') : String(err);
  return `${code}: ${message}`.slice(0, 300);
}
