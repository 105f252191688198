/**
 * The sync schedule: node-cron on SYNC_CRON, in UTC, so daemons on hosts
 * with different local time zones (and DST changes) agree on every tick.
 *
 * node-cron hands each execution the scheduled slot (`context.date`), not the
 * moment the timer happened to fire; that slot is what the job id is made of
 * (see jobs/sync-queue.ts), so daemons whose timers fire a few milliseconds
 * apart still name the same job.
 */
import cron from 'node-cron';
import type { Logger } from '../log.js';

export const SCHEDULE_TIMEZONE = 'Etc/UTC';

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
  const task = cron.schedule(
    options.expression,
    async (context) => {
      try {
        await options.onTick(context.date);
      } catch (err) {
        log.error({ event: 'schedule.tick_failed', tick: context.date.toISOString(), err: describe(err) }, 'could not enqueue the sync for this tick');
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
        error: (m) => log.error({ event: 'schedule.cron', err: describe(m) }, 'node-cron error'),
        debug: (m) => log.debug({ event: 'schedule.cron', msg: describe(m) }, 'node-cron'),
      },
    },
  );
  task.on('execution:missed', (context) => {
    log.warn({ event: 'schedule.missed', tick: context.date.toISOString() }, 'missed a tick (event loop was blocked)');
  });
  task.on('execution:overlap', (context) => {
    log.warn({ event: 'schedule.overlap', tick: context.date.toISOString() }, 'previous enqueue still pending; skipped this tick');
  });
  log.info({ event: 'schedule.started', cron: options.expression, timezone: SCHEDULE_TIMEZONE, next: task.getNextRun()?.toISOString() }, 'sync schedule started');
  return {
    nextRuns: (count) => task.getNextRuns(count),
    async stop() {
      await task.destroy();
    },
  };
}

/**
 * One schedule interval, as the gap between the next two slots. For an
 * irregular expression (`0 9,17 * * *`) this is the gap that is coming, which
 * is what "the mirror should have been refreshed by now" needs.
 */
export function intervalOf(nextRuns: readonly Date[]): number {
  const [a, b] = nextRuns;
  if (a === undefined || b === undefined) throw new RangeError('need two upcoming runs to measure an interval');
  return b.getTime() - a.getTime();
}

/** One interval of `expression` (UTC) without starting a schedule: for `status`, which only reports. */
export function intervalOfExpression(expression: string): number {
  const task = cron.createTask(expression, () => undefined, { timezone: SCHEDULE_TIMEZONE });
  try {
    return intervalOf(task.getNextRuns(2));
  } finally {
    void task.destroy();
  }
}

function describe(value: unknown): string {
  return value instanceof Error ? value.message : String(value);
}
