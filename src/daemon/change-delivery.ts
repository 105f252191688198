/**
 * The daemon's duties to the change feed (db/change-feed.ts): hand new
 * events to the webhook queue (jobs/webhooks/), say how far behind delivery
 * is, and drop events past their retention.
 *
 * Dispatch: events after the queue's dispatched cursor are read from the
 * mirror and added in cursor order, a batch at a time, each as a job whose
 * id is the event's id; then the cursor moves. A crash between the two
 * re-adds the same ids, which BullMQ ignores while the jobs exist (the queue
 * keeps completed jobs for longer than a batch), so an event is handed over
 * at least once and never skipped. A queue that already holds
 * MAX_QUEUED_EVENTS waits: a million-user baseline is paced by the receiver
 * rather than copied into Redis. A target without a cursor (a new one, or
 * one whose Redis lost its data) starts at the oldest event held: at least
 * once, never a silent gap; receivers deduplicate on the event id.
 *
 * Retention: events published more than CHANGES_RETENTION_DAYS ago are
 * dropped after each sync, but never one above the settled cursor of a
 * configured webhook (a job carries no body: the worker reads it from the
 * feed when it sends); when that cursor cannot be read (Redis down), nothing
 * is dropped.
 */
import { ChangeFeed } from '../../db/change-feed.js';
import { isBusy } from '../../db/busy-retry.js';
import { webhookTarget, type WebhookTarget } from '../../jobs/webhooks/contract.js';
import type { WebhookOutcome } from '../../jobs/webhooks/outcomes.js';
import { startWebhookWorker, type WebhookWorkerHandle } from '../../jobs/webhooks/worker.js';
import { createRedisConnection, type RedisClient, type RedisEndpoint } from '../../jobs/redis-connection.js';
import type { Db } from '../../db/open.js';
import { ConfigError, type Config } from '../runtime/config.js';
import { logError } from '../runtime/log-error.js';
import { webhookLag } from '../health/webhook-lag.js';
import type { Logger } from 'pino';
import { createWebhookQueue, enqueueEvents, type WebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { admits, teamIdOf, type SinkFilter } from '../sinks/contract.js';
import type { FieldPolicy } from '../sinks/field-policy.js';
import type { SinkLag, SinkState } from '../sinks/sink-loop.js';
import type { WebhookSink } from '../sinks/sinks-file.js';
import {
  raiseSettled,
  readDispatched,
  readEndpointFailure,
  readRetrying,
  readSettled,
  type EndpointFailure,
  resetCursors,
  writeDispatched,
} from '../../jobs/webhooks/delivery-state.js';

/** Events read and added per round trip. */
const DISPATCH_BATCH = 500;
/** Jobs waiting in the queue beyond which dispatch waits for the receiver. */
const MAX_QUEUED_EVENTS = 20_000;

export interface DispatchResult {
  dispatched: number;
  cursor: number;
  /** True when dispatch stopped because the queue is full. */
  paced: boolean;
}

export async function dispatchNewEvents(
  feed: ChangeFeed,
  queue: WebhookQueue,
  log: Logger,
  retentionDays: number,
  filter: SinkFilter = {},
): Promise<DispatchResult> {
  let cursor = await readDispatched(queue);
  const { latest } = feed.bounds();
  if (cursor > latest) {
    // Beyond the newest event: the mirror file was rebuilt and its cursors began again (a new epoch).
    log.warn(
      { event: 'webhooks.feed_rebuilt', cursor, latest },
      'the feed is newer than the webhook cursor (mirror rebuilt): delivering from its start',
    );
    cursor = 0;
    await resetCursors(queue, cursor);
  }
  let dispatched = 0;
  for (;;) {
    const queued = await queue.count();
    if (queued >= MAX_QUEUED_EVENTS) return { dispatched, cursor, paced: true };
    const page = feed.page(cursor, Math.min(DISPATCH_BATCH, MAX_QUEUED_EVENTS - queued));
    if (page.gone && page.restore !== undefined) {
      // The cursor came from the file a restore replaced: what it delivered after the backup is gone from the feed,
      // and nothing will be issued under those cursors again. Both cursors go back to the backup's end, so the
      // mirror.restored event and everything after it are delivered; lag and retention read from there.
      log.warn(
        { event: 'webhooks.feed_restored', cursor, resumeAfter: page.oldest, restoredAt: page.restore.at, backupAt: page.restore.backupAt },
        'the mirror was restored from a backup: webhook delivery resumes after the backup, with a mirror.restored event',
      );
      cursor = page.oldest;
      await resetCursors(queue, cursor);
      continue;
    }
    if (page.gone) {
      // A new target on a feed retention has trimmed starts at what is held; a known one can only get
      // here by an operator's hand (retention holds at its cursor): say so, and go on from what is held.
      if (cursor === 0)
        log.info({ event: 'webhooks.start', oldest: page.oldest }, `webhook target new: delivering from the oldest event held`);
      else log.error({ event: 'webhooks.events_dropped', cursor, oldest: page.oldest }, 'events were dropped before they were dispatched');
      cursor = page.oldest;
      await writeDispatched(queue, cursor);
      continue;
    }
    if (page.events.length === 0) return { dispatched, cursor, paced: false };
    // A webhook sink's filter: what it does not admit gets no job, and the cursor passes it by.
    const admitted = page.events.filter((e) => admits(filter, e.type, e.type.startsWith('mirror.') ? null : teamIdOf(e.body)));
    if (admitted.length > 0) await enqueueEvents(queue, admitted, retentionDays);
    cursor = page.next;
    await writeDispatched(queue, cursor);
    dispatched += page.events.length;
  }
}

interface DeliveryLag {
  /** The feed's newest cursor. */
  latest: number;
  /** Every event up to here was delivered or failed for good. */
  settled: number;
  eventsBehind: number;
  /** Since the oldest event not yet settled was published; 0 when none. */
  secondsBehind: number;
  failed: number;
  /** The endpoint failing (deliveries held), or null. */
  endpoint: EndpointFailure | null;
}

/** What /readyz and /metrics read of webhook delivery. */
export type WebhookLagFacts = Pick<DeliveryLag, 'eventsBehind' | 'secondsBehind' | 'failed' | 'endpoint'>;

async function deliveryLag(feed: ChangeFeed, queue: WebhookQueue, now: Date): Promise<DeliveryLag> {
  const { latest } = feed.bounds();
  const [settledRaw, counts, endpoint] = await Promise.all([readSettled(queue), queue.getJobCounts('failed'), readEndpointFailure(queue)]);
  const at = latest > settledRaw ? feed.publishedAfter(settledRaw) : undefined;
  return { latest, ...webhookLag(latest, settledRaw, at, now), failed: counts.failed ?? 0, endpoint };
}

/**
 * Drops events past retention, up to `hold` (Infinity without webhooks).
 * Runs on the daemon's connection just after a sync, when no run holds the
 * write lock; should another writer hold it, this waits at most a moment
 * and leaves the work to the next sync.
 */
function pruneFeed(feed: ChangeFeed, retentionDays: number, hold: number, now: Date, log: Logger): number {
  const cutoff = new Date(now.getTime() - retentionDays * 86_400_000).toISOString();
  try {
    const dropped = feed.prune(cutoff, hold);
    if (dropped > 0)
      log.info(
        { event: 'changes.pruned', dropped, cutoff, hold: Number.isFinite(hold) ? hold : null },
        `dropped ${dropped} change events past retention`,
      );
    return dropped;
  } catch (err) {
    if (!isBusy(err)) throw err;
    log.info({ event: 'changes.prune_deferred' }, 'mirror busy; change events past retention are dropped after the next sync');
    return 0;
  }
}

const WEBHOOK_LOCK_MS = 10_000;

/** How often the daemon looks for events it did not publish itself (`sync --once`, `resolve --online`) and for room in a full queue. */
const DISPATCH_INTERVAL_MS = 2_000;

/**
 * One webhook delivery: WEBHOOK_URL (no sink name, no filter, every field:
 * today's queue and cursors, unchanged) or a webhook sink of SINKS_FILE
 * (its own queue, named for the sink; its filter decides what is queued,
 * its field policy what the worker sends).
 */
interface WebhookChannelSettings {
  target: WebhookTarget;
  secret: string;
  filter: SinkFilter;
  /** Applied to the body when the worker reads it from the feed; undefined: the event as published. */
  policy: FieldPolicy | undefined;
}

/** A webhook sink of SINKS_FILE as the daemon delivers it. */
function webhookChannelOf(sink: WebhookSink): WebhookChannelSettings {
  const more = { sink: sink.name, policy: sink.policy.id, ...(sink.tls === undefined ? {} : { tls: sink.tls }) };
  return { target: webhookTarget(sink.url, more), secret: sink.secret, filter: sink.filter, policy: sink.policy };
}

export interface ChangeDeliveryOptions {
  /** The daemon's connection to the mirror: it reads the feed and drops what is past retention. */
  db: Db;
  config: Config<'MIRROR_ID' | 'CHANGES_RETENTION_DAYS' | 'WEBHOOK_TIMEOUT_MS'>;
  /** webhookSettings(config): undefined without WEBHOOK_URL. */
  webhooks: { target: WebhookTarget; secret: string } | undefined;
  /** The webhook sinks of SINKS_FILE (sinksOf(config) of kind `webhook`): one queue each. */
  webhookSinks?: readonly WebhookSink[];
  /** `held`: why webhooks may not queue on this Redis (it can lose jobs; jobs/redis-durability.ts), undefined when they may. */
  redis: { control: RedisClient; endpoint: RedisEndpoint; prefix: string; held: string | undefined };
  logger: Logger;
  /** Each attempt's outcome; `sink` names the webhook sink (undefined for WEBHOOK_URL). */
  onOutcome?: (outcome: WebhookOutcome, sink: string | undefined) => void;
  /** The highest cursor every sink's destination holds (src/sinks/start.ts): retention drops nothing above it. */
  sinksHold?: () => number;
}

export interface ChangeDelivery {
  /** The WEBHOOK_URL queue; undefined without it (or while webhooks are held). */
  queue: WebhookQueue | undefined;
  /** After each sync job: dispatch what it published, then drop what is past retention. */
  afterSync(): Promise<void>;
  /** WEBHOOK_URL delivery's lag (rejects without it). */
  lag: () => Promise<DeliveryLag>;
  /**
   * Each webhook sink of SINKS_FILE as the other sinks report themselves (status, /metrics):
   * read from Redis at every dispatch (every 2 s), so a scrape makes no round trip.
   */
  sinkReport: (now: Date) => Array<SinkState & SinkLag>;
  /** Stops dispatch and the workers (waiting up to `timeoutMs` for a request in flight), closes the queues. True when drained. */
  close(timeoutMs: number): Promise<boolean>;
}

interface Channel {
  settings: WebhookChannelSettings;
  queue: WebhookQueue;
  connection: RedisClient;
  worker: WebhookWorkerHandle;
  /** The sink's row (webhook sinks of SINKS_FILE), refreshed at every dispatch. */
  state: SinkState;
  lag: { latest: number; settled: number; at: string | undefined } | undefined;
}

/** Jobs a webhook queue has not settled: waiting, being sent, or held for a retry. */
async function unsettledJobs(queue: WebhookQueue): Promise<number> {
  const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
  return Object.values(c).reduce((a, b) => a + b, 0);
}

/**
 * The daemon's change feed duties, started once Redis answers. Webhooks run
 * only on a Redis that keeps queued jobs (the removal gate's verdict): on
 * one that can lose them they are held, loudly, and retention holds still.
 * Dispatch runs one at a time (a tick that finds one running skips), so
 * each cursor has one writer.
 */
export function startChangeDelivery(o: ChangeDeliveryOptions): ChangeDelivery {
  const log = o.logger;
  const feed = new ChangeFeed(o.db);
  const { control, endpoint, prefix, held } = o.redis;
  const all: WebhookChannelSettings[] = [
    ...(o.webhooks === undefined ? [] : [{ ...o.webhooks, filter: {}, policy: undefined }]),
    ...(o.webhookSinks ?? []).map(webhookChannelOf),
  ];
  if (all.length > 0 && held !== undefined)
    for (const c of all)
      log.error(
        { event: 'webhooks.held', target: c.target.id, sink: c.target.sink ?? null },
        `webhooks not started: this Redis can lose queued jobs: ${held}`,
      );
  const channels: Channel[] =
    held !== undefined
      ? []
      : all.map((settings) => {
          const { target } = settings;
          const queue = createWebhookQueue(control, { mirrorId: o.config.MIRROR_ID, target, prefix, logger: log });
          const connection = createRedisConnection(endpoint, {
            role: 'worker',
            logger: log,
            connectionName: target.sink === undefined ? 'user-mirror:webhook-worker' : `user-mirror:webhook-worker:${target.sink}`,
          });
          const policy = settings.policy;
          const worker = startWebhookWorker({
            connection,
            prefix,
            mirrorId: o.config.MIRROR_ID,
            target,
            secret: settings.secret,
            // The sink's field policy applies as the body leaves: the feed keeps the event whole, Redis never holds it.
            eventBody:
              policy === undefined
                ? (cursor, eventId) => feed.body(cursor, eventId)
                : (cursor, eventId) => {
                    const body = feed.body(cursor, eventId);
                    return body === undefined ? undefined : policy.applyToEvent(body);
                  },
            timeoutMs: o.config.WEBHOOK_TIMEOUT_MS,
            // Renewed while a request is in flight; after a crash, later events wait at most this long for the lost one.
            lockDurationMs: WEBHOOK_LOCK_MS,
            logger: log,
            ...(o.onOutcome === undefined ? {} : { onOutcome: (outcome: WebhookOutcome) => o.onOutcome?.(outcome, target.sink) }),
          });
          log.info(
            { event: 'webhooks.started', target: target.id, url: target.url, queue: queue.name, sink: target.sink ?? null },
            target.sink === undefined ? `webhooks to ${target.url}` : `sink ${target.sink}: webhooks to ${target.url}`,
          );
          const state: SinkState = {
            name: target.sink ?? 'webhook',
            kind: 'webhook',
            where: target.url,
            policy: policy?.id ?? 'all',
            position: null,
            scanned: 0,
            delivered: 0,
            failing: null,
            stopped: null,
          };
          return { settings, queue, connection, worker, state, lag: undefined };
        });
  const shorthand = channels.find((c) => c.settings.target.sink === undefined);

  /** Queues what each channel's filter admits; then reads back how far each has settled (its sink row). */
  const dispatchOne = async (c: Channel): Promise<void> => {
    const { queue, settings, state } = c;
    try {
      const r = await dispatchNewEvents(feed, queue, log, o.config.CHANGES_RETENTION_DAYS, settings.filter);
      if (r.dispatched > 0)
        log.info(
          { event: 'webhooks.dispatched', events: r.dispatched, cursor: r.cursor, paced: r.paced, sink: settings.target.sink ?? null },
          `${r.dispatched} events queued for the webhook${settings.target.sink === undefined ? '' : ` sink ${settings.target.sink}`}`,
        );
      // The filter passes events by without a job: with nothing left unsettled, everything dispatched is settled
      // (this dispatcher is the queue's one producer, so no job can appear between the count and the raise).
      if ((await unsettledJobs(queue)) === 0) await raiseSettled(queue.redis, queue.toKey('settled'), r.cursor);
      const [settled, failure] = await Promise.all([readSettled(queue), readEndpointFailure(queue)]);
      // Failing as the other kinds are: while the endpoint fails, or while an event is retried (the receiver
      // down, timing out, answering 5xx), since every later event waits for it.
      const retrying = failure === null ? await readRetrying(queue) : null;
      const { latest } = feed.bounds();
      state.position = settled;
      state.scanned = settled;
      state.failing =
        failure ??
        (retrying === null
          ? null
          : {
              since: state.failing?.since ?? new Date().toISOString(),
              last: `event ${retrying.eventId} retried ${retrying.attempts} times: ${retrying.last}`,
            });
      c.lag = { latest, settled, at: latest > settled ? feed.publishedAfter(settled) : undefined };
    } catch (err) {
      logError(
        log,
        'warn',
        { event: 'webhooks.dispatch_failed', sink: settings.target.sink ?? null, err },
        'could not queue events; trying again',
      );
      const last = err instanceof Error ? err.message : String(err);
      state.failing = { since: state.failing?.since ?? new Date().toISOString(), last: `the queues' Redis: ${last}` };
    }
  };
  let running: Promise<void> | undefined;
  const dispatch = (): Promise<void> => {
    if (channels.length === 0) return Promise.resolve();
    running ??= (async () => {
      for (const c of channels) await dispatchOne(c);
    })().finally(() => (running = undefined));
    return running;
  };
  const timer = channels.length === 0 ? undefined : setInterval(() => void dispatch(), DISPATCH_INTERVAL_MS);
  timer?.unref();
  void dispatch();

  return {
    queue: shorthand?.queue,
    async afterSync() {
      await dispatch();
      let hold = Infinity;
      if (all.length > 0) {
        // What a webhook still needs is every event not yet settled (delivered, or failed for good): its job
        // reads the body from the feed when it is sent. Unknown (Redis down, held): keep everything.
        if (channels.length === 0) return;
        try {
          for (const c of channels) hold = Math.min(hold, await readSettled(c.queue));
        } catch {
          return;
        }
      }
      // Nor what a sink's destination has not yet taken (src/sinks): a sink behind retention would have to stop.
      hold = Math.min(hold, o.sinksHold?.() ?? Infinity);
      pruneFeed(feed, o.config.CHANGES_RETENTION_DAYS, hold, new Date(), log);
    },
    lag: () => (shorthand === undefined ? Promise.reject(new Error('no webhooks')) : deliveryLag(feed, shorthand.queue, new Date())),
    sinkReport: (now) =>
      channels
        .filter((c) => c.settings.target.sink !== undefined)
        .map((c) => {
          const l = c.lag === undefined ? undefined : webhookLag(c.lag.latest, c.lag.settled, c.lag.at, now);
          return { ...c.state, eventsBehind: l?.eventsBehind ?? 0, secondsBehind: l?.secondsBehind ?? 0 };
        }),
    async close(timeoutMs) {
      if (timer !== undefined) clearInterval(timer);
      await running;
      const drained = await Promise.all(channels.map(async (c) => (await c.worker.close(timeoutMs)).drained));
      for (const c of channels) c.connection.disconnect();
      await Promise.all(channels.map((c) => c.queue.close().catch(() => undefined)));
      return drained.every(Boolean);
    },
  };
}

/**
 * WEBHOOK_URL and its secret, or undefined when webhooks are off. A URL without a secret is a
 * configuration error, not unsigned delivery: events carry end users' health data, and a receiver
 * cannot tell an unsigned POST from a forged one (jobs/WEBHOOKS.md).
 */
export function webhookSettings(config: Config<'WEBHOOK_URL' | 'WEBHOOK_SECRET'>): { target: WebhookTarget; secret: string } | undefined {
  if (config.WEBHOOK_URL === undefined) return undefined;
  if (config.WEBHOOK_SECRET === undefined)
    throw new ConfigError([
      "WEBHOOK_SECRET: is required when WEBHOOK_URL is set (events are always signed); make one with 'user-mirror webhooks new-secret'",
    ]);
  return { target: webhookTarget(config.WEBHOOK_URL), secret: config.WEBHOOK_SECRET };
}
