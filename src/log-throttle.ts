/**
 * Log lines a months-long process can afford: the first of a run of
 * identical events goes through, then at most one per interval with a count
 * of what was held back. While Redis is down every connection reports every
 * reconnect attempt; the disk must not fill with the same line.
 */
import type { Logger } from './log.js';

export interface ThrottleVerdict {
  log: boolean;
  /** Events with this key held back since the last one let through. */
  suppressed: number;
}

export class RepeatThrottle {
  private readonly seen = new Map<string, { lastLoggedAt: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  hit(key: string): ThrottleVerdict {
    const t = this.now();
    const entry = this.seen.get(key);
    if (entry === undefined || t - entry.lastLoggedAt >= this.intervalMs) {
      const suppressed = entry?.suppressed ?? 0;
      this.seen.set(key, { lastLoggedAt: t, suppressed: 0 });
      return { log: true, suppressed };
    }
    entry.suppressed++;
    return { log: false, suppressed: entry.suppressed };
  }
}

/*
 * An 'error' listener for BullMQ workers and queue events. Without one an
 * 'error' event crashes the process; with Redis down they come on every
 * reconnect attempt, many a second. One line per kind of error and interval,
 * with the count held back, is what a months-long process can afford.
 */
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
