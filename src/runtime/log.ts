/**
 * Logging: the process logger, its rendering for a terminal, and throttles
 * for errors that repeat (a Redis outage must not write a line per retry).
 *
 * The process logger: pino, one JSON event per line on stdout. Keys are
 * redacted by path as a second line of defence; the first is never putting
 * them into a log object at all.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';
import { Writable } from 'node:stream';
import { errorMessage, MESSAGE_MAX_CHARS } from './errors.js';

export type { Logger };

const REDACT = [
  'apiKey',
  'managementKey',
  '*.apiKey',
  '*.managementKey',
  'headers["x-management-key"]',
  'headers["x-service-api-key"]',
  'headers.authorization',
  '*.headers["x-management-key"]',
  '*.headers["x-service-api-key"]',
  'SERVICE_API_KEY',
  'MANAGEMENT_KEY',
  'REPLICA_API_KEY',
];

export function createLogger(level: LevelWithSilent = 'info', destination?: NodeJS.WritableStream): Logger {
  const options = { level, base: { pid: process.pid }, redact: { paths: REDACT, censor: '[redacted]' } };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}

/** For library use and tests: a logger that writes nothing. */
export const silentLogger: Logger = pino({ level: 'silent' });

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
 * Log lines for a person at a terminal. pino writes one JSON event per line
 * (what pm2, log shippers and `jq` want); on a terminal the same events are
 * rendered as short sentences, and the JSON never reaches the screen.
 *
 * `sync.retry` gets its own sentence (what failed, which attempt, when the
 * next try is), so a run waiting on a dead service says so as it waits.
 * Events a command already shows another way are left out (`sync.finished`:
 * the summary table; `sync.progress`: the progress line).
 */
const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };
const HIDDEN_EVENTS = new Set(['sync.finished', 'sync.progress']);
const NOT_FIELDS = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'event']);

/** One JSON log line → the line a person reads, or undefined to leave it out. */
export function humanLine(json: string): string | undefined {
  let e: Record<string, unknown>;
  try {
    e = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const event = typeof e.event === 'string' ? e.event : undefined;
  if (event !== undefined && HIDDEN_EVENTS.has(event)) return undefined;
  if (event === 'sync.retry') {
    const seconds = typeof e.delayMs === 'number' ? (e.delayMs / 1000).toFixed(1) : '?';
    return `retrying ${String(e.what)}: attempt ${String(e.attempt)} failed (${String(e.err)}); next try in ${seconds} s`;
  }
  const level = LEVELS[typeof e.level === 'number' ? e.level : 30] ?? 'info';
  const fields = Object.entries(e)
    .filter(([k, v]) => !NOT_FIELDS.has(k) && v !== undefined && v !== null)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  const prefix = level === 'info' ? '' : `${level}: `;
  return `${prefix}${typeof e.msg === 'string' ? e.msg : (event ?? '')}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`;
}

/** A pino destination that writes `humanLine`s to `out`. */
export function humanLog(out: NodeJS.WritableStream): Writable {
  let pending = '';
  return new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      pending += chunk.toString();
      let nl = pending.indexOf('\n');
      while (nl >= 0) {
        const line = humanLine(pending.slice(0, nl));
        if (line !== undefined) out.write(`${line}\n`);
        pending = pending.slice(nl + 1);
        nl = pending.indexOf('\n');
      }
      done();
    },
  });
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
