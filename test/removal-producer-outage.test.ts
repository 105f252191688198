/**
 * A long-lived producer survives a long Redis outage.
 *
 * The incident: a producer that lives for months (an HTTP handler that
 * enqueues member removals) stopped for good after ~10 s of Redis outage:
 * its connection gave up reconnecting, and every enqueue from then on failed
 * with `Connection is closed.`, even after Redis came back, until the process
 * was restarted. Offboarding silently stopped.
 *
 * Here one producer connection and one queue live through the whole run
 * while a loop enqueues a removal every ~250 ms: a few seconds with Redis
 * up, then 25 s with Redis killed, then Redis restarted on the same port
 * (AOF with appendfsync always keeps every acknowledged job). During the
 * outage every enqueue must fail fast (PRODUCER_WAIT_MS plus slack) with a
 * RedisUnavailableError; after the restart the same producer must enqueue
 * again within 10 s, and from then on every time. Afterwards the queue must
 * hold exactly the jobs that were reported as enqueued.
 *
 * Real timing, no fake timers: it is the real reconnect backoff under test.
 * Needs a Redis the test started (it kills and restarts it).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection, type RedisClient, RedisUnavailableError } from '../jobs/redis-connection.js';
import { PRODUCER_WAIT_MS, enqueueMemberRemoval } from '../jobs/removals/producer.js';
import { createRemovalQueue, type RemovalQueue } from '../jobs/removals/queue-handle.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';

const INTERVAL_MS = 250;
const WARM_UP_MS = 3_000;
const DOWN_MS = 25_000;
/** How soon after Redis is back the producer must enqueue again (the backoff is capped at 5 s). */
const RECOVERY_MS = 10_000;
/** Enqueues after the restart: long enough to have a good run of them past RECOVERY_MS. */
const AFTER_RESTART_MS = 15_000;
/** A failed enqueue waits PRODUCER_WAIT_MS for the connection; the rest is slack for a loaded machine. */
const FAIL_FAST_MS = PRODUCER_WAIT_MS + 1_000;

interface Attempt {
  /** Start of the call, ms relative to the kill (negative: before it). */
  at: number;
  startedAt: number;
  durationMs: number;
  /** The member the call asked to remove, to find its job in the queue afterwards. */
  member: string;
  outcome: { ok: true; jobId: string; deduplicated: boolean } | { ok: false; name: string; message: string; sent: boolean };
}

let redis: TestRedis;
let connection: RedisClient;
let queue: RemovalQueue;

beforeAll(async () => {
  redis = await startTestRedis();
  connection = createRedisConnection(redis.url, { role: 'producer' });
  queue = createRemovalQueue(connection, {
    target: 'https://management.example.com',
    prefix: `t${randomUUID().slice(0, 8)}`,
  });
});

afterAll(async () => {
  await queue?.close();
  connection?.disconnect();
  await redis?.stop();
});

describe('a long-lived producer through a Redis outage', () => {
  it('fails fast while Redis is down, recovers by itself after the restart, and loses or invents nothing', async () => {
    const attempts: Attempt[] = [];
    const inFlight: Array<Promise<void>> = [];
    let running = true;

    // Requests arrive at their own pace, as they would at an HTTP handler: one every
    // INTERVAL_MS, whether or not the previous one has answered.
    const enqueueOne = async (): Promise<void> => {
      const startedAt = Date.now();
      const member = randomUUID();
      try {
        const added = await enqueueMemberRemoval(queue, { org_id: randomUUID(), member_id: member });
        attempts.push({
          at: 0,
          startedAt,
          member,
          durationMs: Date.now() - startedAt,
          outcome: { ok: true, jobId: added.jobId, deduplicated: added.deduplicated },
        });
      } catch (err) {
        const e = err instanceof Error ? err : new Error(String(err));
        const sent = err instanceof RedisUnavailableError && err.sent;
        attempts.push({
          at: 0,
          startedAt,
          member,
          durationMs: Date.now() - startedAt,
          outcome: { ok: false, name: e.name, message: e.message, sent },
        });
      }
    };
    const loop = (async () => {
      while (running) {
        inFlight.push(enqueueOne());
        await sleep(INTERVAL_MS);
      }
    })();

    // The kill lands between two enqueues (half an interval off the loop's ticks, every call
    // answered), as far as timers on a loaded machine allow: one in flight at the kill fails with
    // `sent: true` (its job may be stored; no client can tell), which the count below allows for.
    await sleep(WARM_UP_MS + INTERVAL_MS / 2);
    await Promise.all(inFlight);
    const killAt = Date.now();
    await redis.kill();
    await sleep(DOWN_MS);
    const restartBegunAt = Date.now() - killAt;
    await redis.restart();
    // Redis answers PING again from here on.
    const restartAt = Date.now() - killAt;
    await sleep(AFTER_RESTART_MS);
    running = false;
    await loop;
    await Promise.all(inFlight);

    for (const a of attempts) a.at = a.startedAt - killAt;
    attempts.sort((a, b) => a.at - b.at);
    const before = attempts.filter((a) => a.at < 0);
    const after = attempts.filter((a) => a.at >= 0);

    const failures = after.filter((a) => !a.outcome.ok);
    const firstFailure = failures[0];
    const lastFailure = failures.at(-1);
    const firstSuccessAfterRestart = after.find((a) => a.at >= restartAt && a.outcome.ok);
    const firstCompletionAfterRestart = Math.min(
      ...after.filter((a) => a.outcome.ok && a.at + a.durationMs >= restartBegunAt).map((a) => a.at + a.durationMs),
    );
    const summary = {
      enqueues: attempts.length,
      beforeKill: before.length,
      restartBegunAtMs: restartBegunAt,
      restartAtMs: restartAt,
      firstEnqueueCompletedAfterRestartMs: firstCompletionAfterRestart - restartAt,
      failures: failures.length,
      firstFailureAtMs: firstFailure?.at,
      lastFailureAtMs: lastFailure?.at,
      failedDurationMs:
        failures.length > 0
          ? { min: Math.min(...failures.map((f) => f.durationMs)), max: Math.max(...failures.map((f) => f.durationMs)) }
          : undefined,
      firstSuccessStartedAfterRestartMs: firstSuccessAfterRestart === undefined ? undefined : firstSuccessAfterRestart.at - restartAt,
      failureMessages: [...new Set(failures.map((f) => (f.outcome.ok ? '' : `${f.outcome.name}: ${f.outcome.message}`)))],
    };
    console.log('producer outage run', JSON.stringify(summary, null, 2));

    // Before the kill: all good, and the loop really ran.
    expect(before.length).toBeGreaterThanOrEqual(8);
    expect(before.filter((a) => !a.outcome.ok)).toEqual([]);

    // The test really took Redis away: every enqueue that began and ended while Redis was down
    // failed. (Those started in the last PRODUCER_WAIT_MS before the restart may still be waiting
    // for the connection when Redis is back, and succeed: that is the point.)
    const duringOutage = after.filter((a) => a.at + a.durationMs < restartBegunAt);
    expect(duringOutage.length).toBeGreaterThanOrEqual(50);
    expect(duringOutage.filter((a) => a.outcome.ok)).toEqual([]);

    // Every failure says what happened, in the producer's own terms, and came fast: nothing sent
    // (Redis away before the call) or, for a call cut off in flight, that the removal may be queued.
    for (const f of failures) {
      expect(f.outcome).toMatchObject({
        ok: false,
        name: 'RedisUnavailableError',
        message: expect.stringMatching(
          f.outcome.ok || !f.outcome.sent
            ? /Redis is unreachable: .*removal not enqueued/
            : /Redis is unreachable: connection lost while enqueueing; the removal may have been queued/,
        ),
      });
      expect(f.durationMs, `enqueue started at ${f.at} ms failed after ${f.durationMs} ms`).toBeLessThanOrEqual(FAIL_FAST_MS);
    }

    // Back within RECOVERY_MS of the restart, and from then on every single time.
    expect(firstSuccessAfterRestart, 'no enqueue succeeded after the restart').toBeDefined();
    expect(firstSuccessAfterRestart!.at - restartAt).toBeLessThanOrEqual(RECOVERY_MS);
    expect(firstCompletionAfterRestart - restartAt).toBeLessThanOrEqual(RECOVERY_MS);
    const settled = after.filter((a) => a.at > restartAt + RECOVERY_MS);
    expect(settled.length).toBeGreaterThanOrEqual(10);
    expect(settled.filter((a) => !a.outcome.ok)).toEqual([]);

    // The queue holds every job reported as enqueued (none lost to the kill: AOF, appendfsync
    // always), none reported "not enqueued", and at most the calls cut off in flight besides.
    const succeeded = attempts.flatMap((a) => (a.outcome.ok ? [a.outcome] : []));
    const inDoubt = failures.filter((f) => !f.outcome.ok && f.outcome.sent).length;
    expect(inDoubt).toBeLessThanOrEqual(2);
    expect(succeeded.filter((s) => s.deduplicated)).toEqual([]);
    const counts = await queue.getJobCounts('waiting', 'delayed', 'prioritized', 'active', 'completed', 'failed');
    expect(counts).toMatchObject({ delayed: 0, prioritized: 0, active: 0, completed: 0, failed: 0 });
    const waiting = await queue.getWaiting(0, -1);
    const waitingIds = new Set(waiting.map((j) => j.id));
    for (const s of succeeded) expect(waitingIds.has(s.jobId), `job ${s.jobId} reported enqueued`).toBe(true);
    // A job beyond those is a call cut off in flight (`sent`), never one that said "not enqueued".
    const mayBeQueued = new Set(attempts.filter((a) => a.outcome.ok || a.outcome.sent).map((a) => a.member));
    expect(waiting.map((j) => j.data.member_id).filter((m) => !mayBeQueued.has(m))).toEqual([]);
    expect(waitingIds.size - succeeded.length).toBeLessThanOrEqual(inDoubt);
  });
});
