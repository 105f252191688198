/**
 * Logging: the process logger and its rendering for a terminal. Errors into
 * log lines and the throttles for errors that repeat are in log-error.ts
 * (no pino there, so a command that only reports does not load it).
 *
 * The process logger: pino, one JSON event per line on stdout. What the
 * configuration holds that must not be logged is redacted (redaction.ts) as
 * a second line of defence; the first is never putting it into a log object.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';
import { Writable } from 'node:stream';
import { CENSOR, redactionFor, scrubLine, type RedactionConfig } from './redaction.js';

/**
 * The process logger for `config` (its LOG_LEVEL, and what it holds that must not be logged:
 * see redaction.ts); on `destination`, stdout when unset.
 */
export function createLogger(config: RedactionConfig & { LOG_LEVEL: LevelWithSilent }, destination?: NodeJS.WritableStream): Logger {
  const redaction = redactionFor(config);
  const options: pino.LoggerOptions = {
    level: config.LOG_LEVEL,
    base: { pid: process.pid },
    redact: { paths: redaction.paths, censor: CENSOR },
    hooks: { streamWrite: (line: string) => scrubLine(line, redaction) },
  };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}

/** For library use and tests: a logger that writes nothing. */
export const silentLogger: Logger = pino({ level: 'silent' });

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
