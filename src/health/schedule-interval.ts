/**
 * A cron expression's interval, in UTC: what "the mirror (a backup, an
 * export) should have been refreshed by now" is measured in. The daemon's
 * schedules run in SCHEDULE_TIMEZONE; `status` measures the same intervals
 * without starting one.
 */
import { nodeCron } from '../runtime/node-cron.js';

/** UTC, so daemons on hosts with different local time zones (and DST changes) agree on every tick. */
export const SCHEDULE_TIMEZONE = 'Etc/UTC';

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
  const task = nodeCron().createTask(expression, () => undefined, { timezone: SCHEDULE_TIMEZONE });
  try {
    return intervalOf(task.getNextRuns(2));
  } finally {
    void task.destroy();
  }
}
