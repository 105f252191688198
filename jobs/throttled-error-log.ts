/**
 * An 'error' listener for BullMQ workers and queue events. Without one an
 * 'error' event crashes the process; with Redis down they come on every
 * reconnect attempt, many a second. One line per kind of error and interval,
 * with the count held back, is what a months-long process can afford.
 */
import type { Logger } from '../src/log.js';
import { RepeatThrottle } from './repeat-throttle.js';

export interface ThrottledErrorLogOptions {
  /** The log line's `event` field. */
  event: string;
  msg: string;
  intervalMs?: number;
}

export function throttledErrorLog(logger: Logger, options: ThrottledErrorLogOptions): (err: Error) => void {
  const throttle = new RepeatThrottle(options.intervalMs ?? 30_000);
  return (err) => {
    const kind = (err as NodeJS.ErrnoException).code ?? err.message;
    const verdict = throttle.hit(kind);
    if (verdict.log) logger.warn({ event: options.event, err: err.message, suppressed: verdict.suppressed }, options.msg);
  };
}
