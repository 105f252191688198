/**
 * Webhook delivery survives its Redis dying: a Redis with AOF
 * (`appendfsync always`) SIGKILLed mid-delivery and restarted, and a worker
 * process killed with SIGKILL mid-request. Every event arrives, first
 * deliveries in cursor order; a repeat carries the same webhook-id.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { FeedEvent } from '../db/change-feed.js';
import type { TestRedis } from './support/redis-server.js';
import { requireBuiltCli } from './support/cli-process.js';
import { feedEvents, firstDeliveries, SECRET, useWebhookRig, type Receiver, type WebhookRig } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';
import { enqueueEvents } from '../jobs/webhooks/queue-handle.js';

let redis: TestRedis;
let receiver: Receiver;
let rig: WebhookRig;
useWebhookRig((parts) => ({ redis, receiver, rig } = parts));
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
});

describe('webhooks and crashes', () => {
  it('loses nothing when Redis (AOF) is SIGKILLed and restarted mid-delivery', async () => {
    const events = feedEvents(1, 40);
    receiver.latencyMs = 40;
    await rig.startWorker();
    await enqueueEvents(rig.queue, events, 30);
    await eventually(() => firstDeliveries(receiver).length >= 10, 10_000, 'ten deliveries', 20);

    await redis.restart({ downMs: 1_500 });

    await eventually(() => firstDeliveries(receiver).length === 40, 45_000, 'every event delivered', 20);
    expect(firstDeliveries(receiver)).toEqual(events.map((e) => e.id));
    expect(receiver.requests.every((r) => r.verified)).toBe(true);
    await eventually(async () => (await rig.queue.getJobCounts('completed')).completed === 40, 20_000, 'every job completed', 20);
  });

  it('redelivers the event a SIGKILLed worker process was sending, before any later one', async () => {
    requireBuiltCli('jobs/webhooks/worker.js');
    const events = feedEvents(1, 8);
    receiver.latencyMs = 200;
    await enqueueEvents(rig.queue, events, 30);
    const child = startWorkerProcess(rig, receiver.url, redis.url, events);
    await eventually(() => receiver.requests.length >= 3, 20_000, 'the process to be mid-delivery', 20);
    child.kill('SIGKILL');
    const killedAt = receiver.requests.length;

    // A new worker right away: the dead one's job is still locked, and must not be overtaken.
    receiver.latencyMs = 0;
    await rig.startWorker({ stalledIntervalMs: 500 });
    await eventually(() => firstDeliveries(receiver).length === 8, 30_000, 'every event delivered', 20);
    expect(firstDeliveries(receiver)).toEqual(events.map((e) => e.id));
    expect(killedAt).toBeGreaterThanOrEqual(3);
  });
});

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** A worker in its own process (from dist/), lock 2 s so the stalled job is recovered soon; the events' bodies stand in for the mirror's feed. */
function startWorkerProcess(rig: WebhookRig, url: string, redisUrl: string, events: readonly FeedEvent[]): ChildProcess {
  const script = `
    const { startWebhookWorker } = await import('./dist/jobs/webhooks/worker.js');
    const { webhookTarget } = await import('./dist/jobs/webhooks/contract.js');
    const { createRedisConnection } = await import('./dist/jobs/redis-connection.js');
    const { silentLogger } = await import('./dist/src/runtime/log.js');
    const connection = createRedisConnection(process.env.REDIS_URL, { role: 'worker' });
    const bodies = JSON.parse(process.env.EVENT_BODIES);
    startWebhookWorker({ connection, prefix: process.env.QUEUE_PREFIX, mirrorId: process.env.MIRROR_ID, target: webhookTarget(process.env.WEBHOOK_URL),
      secret: process.env.WEBHOOK_SECRET, eventBody: (_cursor, id) => bodies[id], timeoutMs: 5000, logger: silentLogger, lockDurationMs: 2000 });`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: ROOT,
    stdio: 'ignore',
    env: {
      PATH: process.env.PATH,
      REDIS_URL: redisUrl,
      QUEUE_PREFIX: rig.prefix,
      MIRROR_ID: rig.mirrorId,
      WEBHOOK_URL: url,
      WEBHOOK_SECRET: SECRET,
      EVENT_BODIES: JSON.stringify(Object.fromEntries(events.map((e) => [e.id, e.body]))),
    },
  });
  children.push(child);
  return child;
}
