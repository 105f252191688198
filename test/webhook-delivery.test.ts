/**
 * Webhook delivery against a real receiver (node:http, verifying every
 * signature) and a Redis of the test's own: order, deduplication, retries
 * through a flaky and then absent receiver, and refusals.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { WEBHOOK_JOB } from '../jobs/webhooks/contract.js';
import { listFailedWebhooks, retryFailedWebhook } from '../jobs/webhooks/failed.js';
import type { TestRedis } from './support/redis-server.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { dropFeedBody, feedEvents, firstDeliveries, useWebhookRig, type Receiver, type WebhookRig } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';
import { enqueueEvents } from '../jobs/webhooks/queue-handle.js';
import { readDispatched, readEndpointFailure, writeDispatched } from '../jobs/webhooks/delivery-state.js';

let redis: TestRedis;
let receiver: Receiver;
let rig: WebhookRig;
useWebhookRig((parts) => ({ redis, receiver, rig } = parts));

describe('webhook delivery', () => {
  it('logs deliveries at debug and one summary line at info (here at close), not an info line per event', async () => {
    const lines: Array<{ level: number; event?: string; delivered?: number }> = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[number]) });
    const worker = await rig.startWorker({ logger });
    const events = feedEvents(1, 5);
    await enqueueEvents(rig.queue, events, 30);
    await eventually(() => receiver.delivered().length === 5, 10_000, 'five deliveries', 20);
    await worker.close(5_000);
    const info = lines.filter((l) => l.level >= 30);
    expect(info.filter((l) => l.event === 'webhook.delivered')).toEqual([]);
    expect(info.filter((l) => l.event === 'webhook.summary')).toEqual([expect.objectContaining({ delivered: 5, retrying: 0, failed: 0 })]);
    expect(lines.filter((l) => l.event === 'webhook.delivered')).toHaveLength(5);
  });

  it.each([
    ['redirects to https (301)', { status: 301, headers: { location: 'https://example.invalid/hooks' } }],
    ['is gone (410)', { status: 410 }],
    ['refuses the key (401)', { status: 401 }],
  ] as const)(
    'an endpoint that %s holds every event, marks itself failing, and gets them all in order once it answers',
    async (_what, answer) => {
      const events = feedEvents(1, 30);
      receiver.answer = () => answer;
      await rig.startWorker({ backoff: { baseMs: 50, maxMs: 200 } });
      await enqueueEvents(rig.queue, events, 30);
      await eventually(() => receiver.requests.length >= 4, 10_000, 'a few held attempts', 20);
      // Nothing failed, nothing delivered, nothing skipped: the first event was tried again and again.
      expect(await rig.queue.getJobCounts('failed', 'completed')).toEqual({ failed: 0, completed: 0 });
      expect(new Set(receiver.requests.map((r) => r.id))).toEqual(new Set([events[0]?.id]));
      const failing = await readEndpointFailure(rig.queue);
      expect(failing).toEqual({ since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/), last: `status ${answer.status}` });

      receiver.answer = () => ({ status: 204 });
      await eventually(() => firstDeliveries(receiver).length === 30, 10_000, 'every held event delivered', 20);
      expect(firstDeliveries(receiver)).toEqual(events.map((e) => e.id));
      expect(await readEndpointFailure(rig.queue)).toBeNull();
      expect(await rig.queue.getJobCounts('failed')).toEqual({ failed: 0 });
    },
  );

  it('keeps no record in Redis: the body is read from the feed at send; an event gone from the feed fails for good, named', async () => {
    const events = feedEvents(900, 2);
    const [kept, gone] = events;
    if (kept === undefined || gone === undefined) throw new Error('two events expected');
    await enqueueEvents(rig.queue, events, 30);
    // What Redis holds of each job, as stored: ids and the cursor, no body.
    const stored = await rig.queue.redis.hget(`${rig.prefix}:${rig.queue.name}:${kept.id}`, 'data');
    expect(JSON.parse(stored ?? 'null')).toEqual({ cursor: 900, event_id: kept.id, user_id: kept.userId });
    const opts = JSON.parse((await rig.queue.redis.hget(`${rig.prefix}:${rig.queue.name}:${kept.id}`, 'opts')) ?? '{}') as Record<
      string,
      unknown
    >;
    expect(opts).toMatchObject({ removeOnComplete: { count: 10_000, age: 86_400 }, removeOnFail: { count: 10_000, age: 30 * 86_400 } });

    dropFeedBody(gone.id);
    await rig.startWorker();
    await eventually(async () => (await rig.queue.getJobCounts('failed')).failed === 1, 10_000, 'the second event failed', 20);
    expect(receiver.requests.map((r) => [r.id, r.body])).toEqual([[kept.id, kept.body]]);
    expect((await rig.queue.getJob(gone.id))?.failedReason).toBe(
      "the event is no longer in the mirror's change feed (past CHANGES_RETENTION_DAYS, or the mirror was rebuilt or restored from a backup): nothing to send",
    );
  });

  it('delivers events in cursor order, signed, and a re-enqueue delivers nothing twice', async () => {
    const events = feedEvents(1, 20);
    await rig.startWorker();
    expect(await enqueueEvents(rig.queue, events, 30)).toBe(20);
    await writeDispatched(rig.queue, 20);
    await eventually(() => receiver.delivered().length === 20, 10_000, '20 deliveries', 20);

    expect(receiver.delivered()).toEqual(events.map((e) => e.id));
    expect(receiver.requests.every((r) => r.verified)).toBe(true);
    expect(receiver.requests.map((r) => r.body)).toEqual(events.map((e) => e.body));

    // A dispatcher that crashed before recording its cursor hands the same events over again.
    await enqueueEvents(rig.queue, events.slice(5), 30);
    await sleep(500);
    expect(receiver.requests).toHaveLength(20);

    // The cursor never moves back, and lives in the queue's own key space.
    expect(await writeDispatched(rig.queue, 7)).toBe(20);
    expect(await readDispatched(rig.queue)).toBe(20);
    expect(await rig.queue.redis.get(`${rig.prefix}:webhooks-mirror-a-${rig.target.id}:dispatched`)).toBe('20');
  });

  it('gets every event through a flaky receiver that then goes away, in order, duplicates only under one id', async () => {
    const events = feedEvents(1, 30);
    // A fixed pattern: about half the requests fail, in each of the three ways.
    const failures = [
      'ok',
      { status: 500 },
      'ok',
      'destroy',
      'ok',
      { status: 429, headers: { 'retry-after': '1' } },
      'ok',
      { status: 503 },
      'ok',
      'ok',
      'destroy',
      'ok',
    ] as const;
    receiver.answer = ({ n }) => {
      const f = failures[n % failures.length] ?? 'ok';
      return f === 'ok' ? { status: 200 } : f;
    };
    await rig.startWorker();
    await enqueueEvents(rig.queue, events, 30);
    await eventually(() => firstDeliveries(receiver).length >= 12, 30_000, 'a dozen deliveries', 20);

    await receiver.down();
    await sleep(2_500);
    await receiver.up();

    await eventually(() => firstDeliveries(receiver).length === 30, 40_000, 'every event delivered', 20);
    expect(firstDeliveries(receiver)).toEqual(events.map((e) => e.id));
    expect(receiver.requests.every((r) => r.status === 'destroyed' || r.verified)).toBe(true);
    // Every request for one id carried that event's body: a repeat is recognisable by its webhook-id.
    const byId = new Map(events.map((e) => [e.id, e.body]));
    expect(receiver.requests.every((r) => byId.get(r.id) === r.body)).toBe(true);
    expect(receiver.requests.some((r) => r.status === 'destroyed')).toBe(true);
    expect(receiver.requests.some((r) => r.status === 429)).toBe(true);
    // The last answer may be in before its job is marked completed.
    await eventually(async () => (await rig.queue.getJobCounts('completed')).completed === 30, 10_000, 'every job completed', 20);
    expect(await rig.queue.getJobCounts('failed', 'waiting', 'delayed')).toEqual({ failed: 0, waiting: 0, delayed: 0 });
  });

  it('fails a refused event for good, delivers the ones after it, and sends it again on retry', async () => {
    const events = feedEvents(1, 6);
    const refused = events[2]?.id ?? '';
    receiver.answer = ({ id }) => (id === refused ? { status: 400 } : { status: 200 });
    await rig.startWorker();
    await enqueueEvents(rig.queue, events, 30);
    await eventually(() => receiver.delivered().length === 5, 10_000, 'the other five delivered', 20);
    expect(receiver.delivered()).toEqual(events.filter((e) => e.id !== refused).map((e) => e.id));
    expect(receiver.requests.filter((r) => r.id === refused)).toHaveLength(1);

    const failed = await listFailedWebhooks(rig.queue, 10);
    expect(failed).toEqual([
      expect.objectContaining({
        event_id: refused,
        cursor: 3,
        user_id: 'user-3',
        attempts: 1,
        reason: expect.stringContaining('receiver refused this event (400)'),
      }),
    ]);

    receiver.answer = () => ({ status: 200 });
    expect(await retryFailedWebhook(rig.queue, refused)).toEqual({ jobId: refused, result: 'retried' });
    await eventually(() => receiver.delivered().includes(refused), 10_000, 'the retried event delivered', 20);
    expect(await listFailedWebhooks(rig.queue, 10)).toEqual([]);
    expect(await retryFailedWebhook(rig.queue, 'evt_5eed_99')).toEqual({ jobId: 'evt_5eed_99', result: 'not_found' });
  });

  it('fails a job with invalid data once, naming the field, and sends nothing', async () => {
    await rig.startWorker();
    await rig.queue.add(WEBHOOK_JOB, { cursor: -1, event_id: 'evt_5eed_1', user_id: null, body: '{}' }, { jobId: 'bad' });
    await enqueueEvents(rig.queue, feedEvents(2, 1), 30);
    await eventually(() => receiver.delivered().length === 1, 10_000, 'the valid event delivered', 20);
    const failed = await listFailedWebhooks(rig.queue, 10);
    expect(failed).toEqual([
      expect.objectContaining({ event_id: 'bad', reason: expect.stringMatching(/^invalid webhook job: cursor: must be positive/) }),
    ]);
    expect(receiver.requests.map((r) => r.id)).toEqual(['evt_5eed_2']);
  });
});

describe('user-mirror webhooks', () => {
  it('shows counts and the cursor, lists a refused delivery and retries it; exit codes 3 and 2', async () => {
    requireBuiltCli('src/commands/webhooks.js');
    const env = {
      PATH: process.env.PATH,
      REDIS_URL: redis.url,
      QUEUE_PREFIX: rig.prefix,
      MIRROR_ID: rig.mirrorId,
      WEBHOOK_URL: receiver.url,
    };
    const events = feedEvents(1, 3);
    receiver.answer = ({ id }) => (id === 'evt_5eed_2' ? { status: 422 } : { status: 200 });
    await rig.startWorker();
    await enqueueEvents(rig.queue, events, 30);
    await writeDispatched(rig.queue, 3);
    await eventually(
      async () => {
        const c = await rig.queue.getJobCounts('failed', 'completed');
        return c.failed === 1 && c.completed === 2;
      },
      10_000,
      'one failed, two completed',
      20,
    );

    const counts = await runCli(['webhooks', '--json'], env);
    expect(counts.code).toBe(0);
    expect(JSON.parse(counts.stdout)).toMatchObject({
      mirror_id: 'mirror-a',
      target: rig.target.id,
      dispatched: 3,
      jobs: { completed: 2, failed: 1, waiting: 0 },
    });

    const failed = await runCli(['webhooks', '--failed'], env);
    expect(failed.stdout).toMatch(/^EVENT_ID +CURSOR +USER_ID +ATTEMPTS/);
    expect(failed.stdout).toMatch(/evt_5eed_2 +2 +user-2 +1 .*receiver refused this event \(422\)/);
    expect(failed.stdout).not.toContain('token=abc');

    receiver.answer = () => ({ status: 200 });
    expect(await runCli(['webhooks', 'retry', 'evt_5eed_2'], env)).toMatchObject({ code: 0, stdout: 'job evt_5eed_2: re-queued\n' });
    await eventually(() => receiver.delivered().includes('evt_5eed_2'), 10_000, 'the retried delivery', 20);
    expect(await runCli(['webhooks', 'retry', 'evt_5eed_9'], env)).toMatchObject({ code: 3 });
    expect(await runCli(['webhooks', 'retry', '--all'], env)).toMatchObject({ code: 0, stdout: '0 failed webhook(s) re-queued\n' });

    const missing = await runCli(['webhooks'], { ...env, WEBHOOK_URL: '' });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('WEBHOOK_URL');
    expect((await runCli(['webhooks', 'retry'], env)).code).toBe(2);
  });
});
