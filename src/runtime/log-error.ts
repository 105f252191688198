/**
 * Errors into log lines: the one way an error is written to a logger, and
 * throttles for errors that repeat (a Redis outage must not write a line per
 * retry). No pino here, only its type: a module that writes to a logger it
 * is handed imports this file, not log.ts, so a command that never makes a
 * logger (`status`) never loads pino.
 */
import type { Logger } from 'pino';
import { errorMessage, MESSAGE_MAX_CHARS } from './line-text.js';

/** The fields of a line about an error: `err` is the error as caught. */
export interface ErrorFields {
  err: unknown;
  event?: string;
  [field: string]: unknown;
}

/**
 * The one way an error goes into a log line. The line carries, at `level`,
 * the error's message in `err` (one line, at most MESSAGE_MAX_CHARS: what
 * an operator, `humanLine` and a log query read). With the logger at debug,
 * the whole error follows on a debug line of its own, `error.detail`, tied
 * to the first by `of` (its event): pino's err serializer, so the type, the
 * stack and the messages and stacks of its causes.
 */
export function logError(logger: Logger, level: 'info' | 'warn' | 'error' | 'fatal', fields: ErrorFields, msg: string): void {
  const { err } = fields;
  logger[level]({ ...fields, err: errorMessage(err, MESSAGE_MAX_CHARS) }, msg);
  if (err instanceof Error && logger.isLevelEnabled('debug')) logger.debug({ event: 'error.detail', of: fields.event, err }, msg);
}

/**
 * Log lines a months-long process can afford: the first of a run of
 * identical events goes through, then at most one per interval with a count
 * of what was held back. While Redis is down every connection reports every
 * reconnect attempt; the disk must not fill with the same line.
 */
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
    if (verdict.log) logError(logger, 'warn', { event: options.event, err, suppressed: verdict.suppressed }, options.msg);
  };
}
