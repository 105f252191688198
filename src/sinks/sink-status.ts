/**
 * What `status` (and `user-mirror sinks`) says of each sink, read without
 * the daemon: the destination asked for its position (a probe: one
 * connection attempt, within a budget; a webhook sink's is its queue's
 * settled cursor on the queues' Redis), the feed for what the sink's filter
 * has pending after it. A destination that does not answer or refuses, a
 * sink behind the feed's retention, or one further behind than
 * WEBHOOK_LAG_WARN_SECONDS (the one lag threshold of the feed's deliveries)
 * needs the operator: status exits 1 and names it. A PostgreSQL sink
 * (./postgres) says the position its `sink_position` row holds.
 */
import type { ChangeFeed } from '../../db/change-feed.js';
import { createRedisConnection, redisReady, type RedisEndpoint } from '../../jobs/redis-connection.js';
import { webhookTarget } from '../../jobs/webhooks/contract.js';
import { readEndpointFailure, readRetrying, readSettled } from '../../jobs/webhooks/delivery-state.js';
import { createWebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { pendingAfter } from './runner.js';
import type { SinkSettings, WebhookSink } from './sinks-file.js';
import { positionProbeOf } from './start.js';

/** Where webhook sinks' queues are (the queues' Redis, QUEUE_PREFIX, MIRROR_ID): their position is the settled cursor there. */
export interface WebhookQueues {
  endpoint: RedisEndpoint;
  prefix: string;
  mirrorId: string;
}

export interface SinkStatus {
  name: string;
  kind: string;
  where: string;
  policy: string;
  /** The cursor of the last event the destination holds (0: none yet); null when it could not be read. */
  position: number | null;
  /** Events the sink's filter admits after its position (a lower bound when `more`). */
  eventsBehind: number | null;
  secondsBehind: number | null;
  /** Why the sink needs the operator: unreachable, refusing, behind retention, lagging; null when all is well. */
  problem: string | null;
}

const PROBE_BUDGET_MS = 5_000;

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function readSinkStatus(
  feed: ChangeFeed | undefined,
  sink: SinkSettings,
  lagWarnSeconds: number,
  now: Date,
  webhooks?: WebhookQueues,
): Promise<SinkStatus> {
  if (sink.kind === 'webhook') return readWebhookSinkStatus(feed, sink, lagWarnSeconds, now, webhooks);
  const destination = positionProbeOf(sink);
  const base = { name: sink.name, kind: sink.kind, where: destination.where, policy: sink.policy.id };
  let position: number;
  try {
    const pos = await within(
      destination.open().then(() => destination.position()),
      PROBE_BUDGET_MS,
      destination.where,
    );
    position = pos?.cursor ?? 0;
  } catch (err) {
    return { ...base, position: null, eventsBehind: null, secondsBehind: null, problem: `destination failing: ${(err as Error).message}` };
  } finally {
    await destination.close().catch(() => undefined);
  }
  return withPending(base, feed, sink, position, lagWarnSeconds, now, null);
}

/** What the sink's filter has pending after `position`, and whether that (or `problem`) needs the operator. */
function withPending(
  base: Pick<SinkStatus, 'name' | 'kind' | 'where' | 'policy'>,
  feed: ChangeFeed | undefined,
  sink: SinkSettings,
  position: number,
  lagWarnSeconds: number,
  now: Date,
  held: string | null,
): SinkStatus {
  if (feed === undefined) return { ...base, position, eventsBehind: null, secondsBehind: null, problem: held };
  const pending = pendingAfter(feed, sink.filter, position);
  const secondsBehind = pending.firstAt === undefined ? 0 : Math.max(0, Math.round((now.getTime() - Date.parse(pending.firstAt)) / 1000));
  let problem: string | null = held;
  if (problem !== null) return { ...base, position, eventsBehind: pending.events, secondsBehind, problem };
  // A postgres sink loads a new baseline rather than stop: its lag says how it goes.
  if (pending.gone && sink.kind !== 'postgres')
    problem = `behind the feed's retention: events after cursor ${position} were dropped before this sink took them`;
  else if (secondsBehind > lagWarnSeconds)
    problem = `lagging: ${secondsBehind}s behind, above WEBHOOK_LAG_WARN_SECONDS (${lagWarnSeconds}s)`;
  return { ...base, position, eventsBehind: pending.events, secondsBehind, problem };
}

/**
 * A webhook sink: its position is its queue's settled cursor (every event up to it delivered or failed
 * for good); it needs the operator while its endpoint fails, while an event is being retried (the
 * receiver down or answering 5xx: everything after it is held), or with events failed for good.
 */
async function readWebhookSinkStatus(
  feed: ChangeFeed | undefined,
  sink: WebhookSink,
  lagWarnSeconds: number,
  now: Date,
  queues: WebhookQueues | undefined,
): Promise<SinkStatus> {
  const target = webhookTarget(sink.url, { sink: sink.name });
  const base = { name: sink.name, kind: sink.kind, where: target.url, policy: sink.policy.id };
  const unknown = (problem: string): SinkStatus => ({ ...base, position: null, eventsBehind: null, secondsBehind: null, problem });
  if (queues === undefined) return unknown("its queue's Redis was not given (REDIS_URL, QUEUE_PREFIX, MIRROR_ID)");
  const redis = createRedisConnection(queues.endpoint, { role: 'probe', connectionName: 'user-mirror:sink-status' });
  let lastError = 'no answer';
  redis.on('error', (err: Error) => (lastError = err.message));
  const queue = createWebhookQueue(redis, { mirrorId: queues.mirrorId, target, prefix: queues.prefix, readOnly: true });
  queue.on('error', () => undefined);
  try {
    const [settled, failure, retrying, counts] = await within(
      redisReady(redis, PROBE_BUDGET_MS).then(() =>
        Promise.all([readSettled(queue), readEndpointFailure(queue), readRetrying(queue), queue.getJobCounts('failed')]),
      ),
      PROBE_BUDGET_MS,
      "the queues' Redis",
    );
    const failed = counts.failed ?? 0;
    const held =
      failure !== null
        ? `destination failing since ${failure.since}: ${failure.last}`
        : retrying !== null
          ? `destination failing: event ${retrying.eventId} retried ${retrying.attempts} times (${retrying.last}); later events held`
          : failed > 0
            ? `${failed} events failed for good (user-mirror webhooks --sink ${sink.name} --failed)`
            : null;
    return withPending(base, feed, sink, settled, lagWarnSeconds, now, held);
  } catch (err) {
    return unknown(`the queues' Redis: ${(err as Error).message === 'timed out' ? lastError : (err as Error).message}`);
  } finally {
    await queue.close().catch(() => undefined);
    redis.disconnect();
  }
}

/** One line a sink, as `status` prints it. */
export function formatSinkStatus(s: SinkStatus): string {
  const head = `sink ${s.name} (${s.kind}, ${s.where}, policy ${s.policy})`;
  const at = s.position === null ? 'position unknown' : `at cursor ${s.position}`;
  const lag = s.eventsBehind === null ? '' : `, ${s.eventsBehind} events behind (${s.secondsBehind ?? 0}s)`;
  return `${head}: ${at}${lag}${s.problem === null ? '' : ` - FAILING: ${s.problem}`}`;
}
