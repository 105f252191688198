/**
 * The daemon's pure decisions: tick -> job id, start-up catch-up, watchdog,
 * lease ownership, log throttling, shutdown budget. No I/O.
 */
import { webhookSettings } from '../src/daemon/change-delivery.js';
import { readConfig } from '../src/runtime/config.js';
import { describe, expect, it } from 'vitest';
import { syncJobId, syncQueueName, SyncJobDataSchema } from '../jobs/sync/contract.js';
import { leaseIsFree, type LeaseRow } from '../db/sync-lease.js';
import { decideStartupSync } from '../src/daemon/schedule.js';
import { decideWatchdog, INITIAL_WATCHDOG_STATE, type WorkerSample } from '../src/daemon/watchdog.js';
import { intervalOf } from '../src/health/schedule-interval.js';
import { RepeatThrottle } from '../src/runtime/log-error.js';
import { remainingBudget } from '../src/daemon/shutdown.js';

describe('sync queue identity', () => {
  it('names the queue after the mirror', () => {
    expect(syncQueueName('host-a')).toBe('sync-host-a');
  });

  it('derives one job id per tick, the same whoever computes it', () => {
    const tick = new Date('2025-03-01T10:15:00.000Z');
    expect(syncJobId('schedule', tick)).toBe('tick-20250301T101500Z');
    expect(syncJobId('schedule', new Date(tick.getTime()))).toBe(syncJobId('schedule', tick));
  });

  it('ignores milliseconds of the slot (timers fire a little late)', () => {
    expect(syncJobId('schedule', new Date('2025-03-01T10:15:00.437Z'))).toBe('tick-20250301T101500Z');
  });

  it('gives neighbouring ticks different ids', () => {
    expect(syncJobId('schedule', new Date('2025-03-01T10:15:00Z'))).not.toBe(syncJobId('schedule', new Date('2025-03-01T10:15:02Z')));
  });

  it('keeps start-up catch-ups apart from the tick of the same slot', () => {
    const tick = new Date('2025-03-01T10:15:00Z');
    expect(syncJobId('startup', tick)).toBe('catchup-20250301T101500Z');
    expect(syncJobId('startup', tick)).not.toBe(syncJobId('schedule', tick));
  });

  it('produces ids BullMQ accepts (no ":", not an integer)', () => {
    const id = syncJobId('schedule', new Date('2025-12-31T23:59:59Z'));
    expect(id).not.toContain(':');
    expect(`${parseInt(id, 10)}`).not.toBe(id);
  });

  it('validates job data', () => {
    expect(SyncJobDataSchema.safeParse({ reason: 'schedule', tick: '2025-03-01T10:15:00.000Z' }).success).toBe(true);
    expect(SyncJobDataSchema.safeParse({ reason: 'whenever', tick: '2025-03-01T10:15:00.000Z' }).success).toBe(false);
    expect(SyncJobDataSchema.safeParse({ reason: 'schedule', tick: 'soon' }).success).toBe(false);
  });
});

describe('intervalOf', () => {
  it('is the gap between the next two slots', () => {
    expect(intervalOf([new Date('2025-01-01T00:15:00Z'), new Date('2025-01-01T00:30:00Z')])).toBe(15 * 60_000);
  });

  it('refuses fewer than two slots', () => {
    expect(() => intervalOf([new Date()])).toThrow(RangeError);
  });
});

describe('decideStartupSync', () => {
  const now = new Date('2025-03-01T12:00:00Z');
  const interval = 15 * 60_000;

  it('enqueues for a mirror that never synced', () => {
    expect(
      decideStartupSync({ lastSucceededAt: undefined, now, intervalMs: interval, pendingSyncJobs: 0, msToNextTick: interval / 2 }),
    ).toMatchObject({ enqueue: true });
  });

  it('enqueues when the last success is older than one interval', () => {
    const d = decideStartupSync({
      lastSucceededAt: new Date(now.getTime() - interval - 1),
      now,
      intervalMs: interval,
      pendingSyncJobs: 0,
      msToNextTick: interval / 2,
    });
    expect(d.enqueue).toBe(true);
    expect(d.ageMs).toBe(interval + 1);
  });

  it('does nothing for a fresh mirror', () => {
    expect(
      decideStartupSync({
        lastSucceededAt: new Date(now.getTime() - interval),
        now,
        intervalMs: interval,
        pendingSyncJobs: 0,
        msToNextTick: interval / 2,
      }),
    ).toMatchObject({ enqueue: false, reason: 'the mirror is fresh' });
  });

  it('leaves the catch-up to a tick that is about to fire', () => {
    expect(
      decideStartupSync({ lastSucceededAt: undefined, now, intervalMs: interval, pendingSyncJobs: 0, msToNextTick: 30_000 }),
    ).toMatchObject({ enqueue: false, reason: 'the next tick is imminent' });
    expect(
      decideStartupSync({ lastSucceededAt: undefined, now, intervalMs: 24 * 3600_000, pendingSyncJobs: 0, msToNextTick: 120_000 }).enqueue,
    ).toBe(true);
  });

  it('does nothing when a sync is already waiting or running', () => {
    expect(
      decideStartupSync({ lastSucceededAt: undefined, now, intervalMs: interval, pendingSyncJobs: 1, msToNextTick: interval / 2 }),
    ).toMatchObject({ enqueue: false });
  });
});

describe('decideWatchdog', () => {
  const healthy: WorkerSample = { running: true, waiting: 0, active: 0, rateLimited: false };
  const stall = 60_000;

  it('restarts a worker whose job in hand outlived every deadline it is held to', () => {
    expect(decideWatchdog(INITIAL_WATCHDOG_STATE, { ...healthy, active: 1, overdue: true }, 0, stall)).toMatchObject({
      action: 'restart',
      reason: 'overdue-job',
    });
    expect(decideWatchdog(INITIAL_WATCHDOG_STATE, { ...healthy, active: 1, overdue: false }, 0, stall)).toMatchObject({ action: 'none' });
  });

  it('restarts a worker whose loop stopped', () => {
    expect(decideWatchdog(INITIAL_WATCHDOG_STATE, { ...healthy, running: false }, 0, stall)).toMatchObject({
      action: 'restart',
      reason: 'not-running',
    });
  });

  it('restarts after jobs waited with none active for the stall window', () => {
    const stuck = { ...healthy, waiting: 3 };
    const first = decideWatchdog(INITIAL_WATCHDOG_STATE, stuck, 1_000, stall);
    expect(first).toMatchObject({ action: 'none', state: { stuckSince: 1_000 } });
    const early = decideWatchdog(first.state, stuck, 1_000 + stall - 1, stall);
    expect(early.action).toBe('none');
    const late = decideWatchdog(early.state, stuck, 1_000 + stall, stall);
    expect(late).toMatchObject({ action: 'restart', reason: 'idle-with-waiting-jobs', state: { stuckSince: undefined } });
  });

  it('forgets a stall as soon as something is active', () => {
    const first = decideWatchdog(INITIAL_WATCHDOG_STATE, { ...healthy, waiting: 3 }, 0, stall);
    const busy = decideWatchdog(first.state, { ...healthy, waiting: 3, active: 1 }, stall / 2, stall);
    expect(busy.state.stuckSince).toBeUndefined();
    const again = decideWatchdog(busy.state, { ...healthy, waiting: 3 }, stall + 1, stall);
    expect(again.action).toBe('none');
  });

  it('leaves a rate-limited queue alone', () => {
    const limited = { ...healthy, waiting: 5, rateLimited: true };
    const a = decideWatchdog(INITIAL_WATCHDOG_STATE, limited, 0, stall);
    expect(decideWatchdog(a.state, limited, 10 * stall, stall).action).toBe('none');
  });

  it('makes no decision when Redis could not be asked', () => {
    const state = { stuckSince: 5 };
    expect(decideWatchdog(state, undefined, 10 * stall, stall)).toEqual({ action: 'none', state });
  });

  it('is content with an idle worker and an empty queue', () => {
    expect(decideWatchdog(INITIAL_WATCHDOG_STATE, healthy, 0, stall).action).toBe('none');
  });
});

describe('leaseIsFree', () => {
  const row = (over: Partial<LeaseRow> = {}): LeaseRow => ({ holder: 'h', host: 'a', pid: 10, acquiredAt: 0, expiresAt: 1_000, ...over });
  const alive = () => true;
  const dead = () => false;

  it('is free when nobody holds it', () => {
    expect(leaseIsFree(undefined, { host: 'a' }, 0, alive)).toBe(true);
  });

  it('is held by a live holder before expiry', () => {
    expect(leaseIsFree(row(), { host: 'a' }, 500, alive)).toBe(false);
  });

  it('is free once expired', () => {
    expect(leaseIsFree(row(), { host: 'b' }, 1_000, alive)).toBe(true);
  });

  it('is free at once when the holder on this host is dead', () => {
    expect(leaseIsFree(row(), { host: 'a' }, 500, dead)).toBe(true);
  });

  it('trusts a holder on another host until expiry (its pid means nothing here)', () => {
    expect(leaseIsFree(row({ host: 'b' }), { host: 'a' }, 500, dead)).toBe(false);
  });
});

describe('RepeatThrottle', () => {
  it('lets the first through, then one per interval with the count held back', () => {
    let t = 0;
    const throttle = new RepeatThrottle(1_000, () => t);
    expect(throttle.hit('x')).toEqual({ log: true, suppressed: 0 });
    t = 10;
    expect(throttle.hit('x').log).toBe(false);
    expect(throttle.hit('x').log).toBe(false);
    expect(throttle.hit('y').log).toBe(true);
    t = 1_000;
    expect(throttle.hit('x')).toEqual({ log: true, suppressed: 2 });
  });
});

describe('remainingBudget', () => {
  it('counts down from the total, never below the floor', () => {
    expect(remainingBudget(1_000, 10_000, 4_000)).toBe(7_000);
    expect(remainingBudget(1_000, 10_000, 20_000)).toBe(250);
  });
});

describe('webhook settings', () => {
  it('are off without WEBHOOK_URL; a URL without its secret is a configuration error naming the variable', () => {
    expect(webhookSettings({ WEBHOOK_URL: undefined, WEBHOOK_SECRET: undefined })).toBeUndefined();
    expect(() => webhookSettings({ WEBHOOK_URL: 'https://hooks.example/in', WEBHOOK_SECRET: undefined })).toThrow(
      /WEBHOOK_SECRET: is required when WEBHOOK_URL is set/,
    );
    const on = webhookSettings({
      WEBHOOK_URL: 'https://Hooks.example:443/in/?token=t',
      WEBHOOK_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    });
    expect(on?.target.url).toBe('https://hooks.example/in');
    expect(on?.target.id).toMatch(/^[0-9a-f]{16}$/);
  });

  it('refuse a secret that is not whsec_ and base64, without echoing it', () => {
    expect(() => readConfig(['WEBHOOK_SECRET'], { WEBHOOK_SECRET: 'not-a-secret-value' })).toThrow(
      /WEBHOOK_SECRET: must be whsec_ followed by a base64 key/,
    );
    try {
      readConfig(['WEBHOOK_SECRET'], { WEBHOOK_SECRET: 'not-a-secret-value' });
    } catch (err) {
      expect(String(err)).not.toContain('not-a-secret-value');
    }
  });
});
