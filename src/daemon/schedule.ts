/**
 * The sync schedule and the syncs it enqueues: each tick's, and a catch-up
 * at start-up when the mirror is stale.
 *
 * node-cron runs on SYNC_CRON, in UTC, so daemons on hosts
 * with different local time zones (and DST changes) agree on every tick.
 *
 * node-cron hands each execution the scheduled slot (`context.date`), not the
 * moment the timer happened to fire; that slot is what the job id is made of
 * (see jobs/sync/contract.ts), so daemons whose timers fire a few milliseconds
 * apart still name the same job.
 */
import type { Queue } from 'bullmq';
import { logError } from '../runtime/log-error.js';
import { errorMessage } from '../runtime/line-text.js';
import { nodeCron } from '../runtime/node-cron.js';
import { type SyncJobData } from '../../jobs/sync/contract.js';
import { intervalOf, SCHEDULE_TIMEZONE } from '../health/schedule-interval.js';
import type { Logger } from 'pino';
import { enqueueSync } from '../../jobs/sync/queue-handle.js';

export interface ScheduleOptions {
  expression: string;
  /** Called with the scheduled slot; a rejection is logged, never thrown. */
  onTick: (tick: Date) => Promise<void>;
  logger: Logger;
}

export interface Schedule {
  /** The next `count` slots from now. */
  nextRuns(count: number): Date[];
  stop(): Promise<void>;
}

export function startSchedule(options: ScheduleOptions): Schedule {
  const log = options.logger;
  const task = nodeCron().schedule(
    options.expression,
    async (context) => {
      try {
        await options.onTick(context.date);
      } catch (err) {
        logError(
          log,
          'error',
          { event: 'schedule.tick_failed', tick: context.date.toISOString(), err },
          'could not enqueue the sync for this tick',
        );
      }
    },
    {
      name: 'sync-schedule',
      timezone: SCHEDULE_TIMEZONE,
      // An enqueue waiting on a slow Redis must not have the next tick queue up behind it.
      noOverlap: true,
      logger: {
        info: (m) => log.info({ event: 'schedule.cron' }, m),
        warn: (m) => log.warn({ event: 'schedule.cron' }, m),
        error: (m) => logError(log, 'error', { event: 'schedule.cron', err: m }, 'node-cron error'),
        debug: (m) => log.debug({ event: 'schedule.cron', msg: errorMessage(m) }, 'node-cron'),
      },
    },
  );
  task.on('execution:missed', (context) => {
    log.warn({ event: 'schedule.missed', tick: context.date.toISOString() }, 'missed a tick (event loop was blocked)');
  });
  task.on('execution:overlap', (context) => {
    log.warn({ event: 'schedule.overlap', tick: context.date.toISOString() }, 'previous enqueue still pending; skipped this tick');
  });
  log.info(
    { event: 'schedule.started', cron: options.expression, timezone: SCHEDULE_TIMEZONE, next: task.getNextRun()?.toISOString() },
    'sync schedule started',
  );
  return {
    nextRuns: (count) => task.getNextRuns(count),
    async stop() {
      await task.destroy();
    },
  };
}

/**
 * Start-up catch-up: a daemon that was down (deploy, crash, host reboot)
 * should not leave the mirror stale until the next tick, which for a long
 * interval may be far away.
 *
 * The decision is pure. "Fresh" means the last *succeeded* run finished
 * within one schedule interval: a partial run publishes changes but not
 * deletions, so it does not count as a full refresh. A sync that is already
 * waiting or running in this mirror's queue (another daemon started first,
 * or the tick just fired), or a tick about to fire, makes a catch-up
 * redundant.
 */
export interface StartupFacts {
  /** When the last succeeded run finished; undefined if there never was one. */
  lastSucceededAt: Date | undefined;
  now: Date;
  /** One schedule interval (./schedule-interval.ts `intervalOf`). */
  intervalMs: number;
  /** Sync jobs waiting, delayed or active in this mirror's queue. */
  pendingSyncJobs: number;
  /** Time until the next tick. */
  msToNextTick: number;
}

/** A tick this close (as a share of the interval, and at most a minute) will do the catch-up itself. */
const IMMINENT_SHARE = 0.1;
const IMMINENT_MAX_MS = 60_000;

export type StartupDecision = { enqueue: boolean; reason: string; ageMs: number | undefined };

export function decideStartupSync(f: StartupFacts): StartupDecision {
  const ageMs = f.lastSucceededAt === undefined ? undefined : f.now.getTime() - f.lastSucceededAt.getTime();
  if (f.pendingSyncJobs > 0) return { enqueue: false, reason: 'a sync is already queued or running', ageMs };
  if (f.msToNextTick <= Math.min(IMMINENT_MAX_MS, f.intervalMs * IMMINENT_SHARE)) {
    return { enqueue: false, reason: 'the next tick is imminent', ageMs };
  }
  if (ageMs === undefined) return { enqueue: true, reason: 'the mirror has never been synced successfully', ageMs };
  if (ageMs > f.intervalMs) return { enqueue: true, reason: 'the mirror is older than one schedule interval', ageMs };
  return { enqueue: false, reason: 'the mirror is fresh', ageMs };
}

/** A tick's sync job: enqueued, or folded into one already waiting (a peer daemon's tick, a catch-up). */
export async function enqueueTick(queue: Queue<SyncJobData>, tick: Date, log: Logger): Promise<void> {
  const added = await enqueueSync(queue, { reason: 'schedule', tick: tick.toISOString() });
  if (added.outcome === 'enqueued') {
    log.info({ event: 'schedule.tick', tick: tick.toISOString(), jobId: added.jobId }, 'sync enqueued (or already enqueued by a peer)');
  } else {
    log.info(
      { event: 'schedule.tick_coalesced', tick: tick.toISOString(), jobId: added.jobId, into: added.into },
      'a sync job is already waiting; this tick folds into it',
    );
  }
}

/** At start-up: a catch-up sync when the mirror is stale and nothing is about to sync it (decideStartupSync). */
export async function enqueueCatchUpIfStale(
  queue: Queue<SyncJobData>,
  schedule: Schedule,
  lastSucceededAt: () => Date | undefined,
  log: Logger,
): Promise<void> {
  const next = schedule.nextRuns(2);
  const counts = await queue.getJobCounts('wait', 'prioritized', 'delayed', 'active');
  const decision = decideStartupSync({
    lastSucceededAt: lastSucceededAt(),
    now: new Date(),
    intervalMs: intervalOf(next),
    pendingSyncJobs: Object.values(counts).reduce((a, b) => a + b, 0),
    msToNextTick: (next[0]?.getTime() ?? Date.now()) - Date.now(),
  });
  const age = decision.ageMs === undefined ? undefined : Math.round(decision.ageMs / 1000);
  if (!decision.enqueue) {
    log.info({ event: 'startup_sync.skipped', reason: decision.reason, ageSeconds: age }, 'no start-up sync needed');
    return;
  }
  // The id names the coming tick, so daemons that start within one interval enqueue one catch-up between them.
  const slot = next[0] ?? new Date();
  const added = await enqueueSync(queue, { reason: 'startup', tick: slot.toISOString() });
  log.info({ event: 'startup_sync.enqueued', reason: decision.reason, ageSeconds: age, ...added }, 'start-up sync enqueued');
}
