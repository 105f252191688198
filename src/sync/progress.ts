/**
 * Progress of a running sync, for people and for logs.
 *
 * `describeProgress` and `formatProgressLine` are pure. The two sinks are the
 * thin ends: on a terminal one line is redrawn in place (throttled, so a fast
 * sync does not spend its time repainting); elsewhere a structured log line
 * every N pages, because a redrawn line in a log file is noise.
 */
import { Writable } from 'node:stream';
import type { Logger } from 'pino';

export interface ProgressSnapshot {
  pagesDone: number;
  /** Pages the scan expects in total, the first included. */
  pagesPlanned: number;
  usersSeen: number;
  elapsedMs: number;
}

export interface ProgressFigures {
  /** Users per second since the pass started. */
  rate: number;
  /** Remaining time at the current rate; undefined until there is a rate to go by. */
  etaMs: number | undefined;
}

export function describeProgress(s: ProgressSnapshot): ProgressFigures {
  const rate = s.elapsedMs > 0 ? (s.usersSeen * 1000) / s.elapsedMs : 0;
  const pagesLeft = Math.max(0, s.pagesPlanned - s.pagesDone);
  const msPerPage = s.pagesDone > 0 ? s.elapsedMs / s.pagesDone : undefined;
  return { rate, etaMs: msPerPage === undefined ? undefined : pagesLeft * msPerPage };
}

export function formatProgressLine(s: ProgressSnapshot): string {
  const { rate, etaMs } = describeProgress(s);
  return (
    `pages ${s.pagesDone}/${s.pagesPlanned} · users ${formatCount(s.usersSeen)} · ` +
    `${formatCount(Math.round(rate))} users/s · ETA ${etaMs === undefined ? '?' : formatDuration(etaMs)}`
  );
}

export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** `850ms`, `42s`, `3m05s`, `1h02m`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

export interface ProgressSink {
  update(snapshot: ProgressSnapshot): void;
  /** Removes whatever the sink left on screen; call before printing the summary. */
  finish(): void;
}

const CLEAR_LINE = '\r\x1b[2K';

export class TerminalProgress implements ProgressSink {
  private lastDrawMs = 0;
  private line = '';

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly minIntervalMs = 100,
    private readonly now: () => number = () => performance.now(),
  ) {}

  update(snapshot: ProgressSnapshot): void {
    const at = this.now();
    const last = snapshot.pagesDone >= snapshot.pagesPlanned;
    if (!last && at - this.lastDrawMs < this.minIntervalMs) return;
    this.lastDrawMs = at;
    this.line = formatProgressLine(snapshot);
    this.out.write(CLEAR_LINE + this.line);
  }

  finish(): void {
    if (this.line !== '') this.out.write(CLEAR_LINE);
    this.line = '';
  }

  /**
   * A log destination that lifts the progress line out of the way first, so
   * a warning printed mid-scan does not end up glued to it.
   */
  around(destination: NodeJS.WritableStream): Writable {
    return new Writable({
      write: (chunk: Buffer | string, _encoding, done) => {
        if (this.line !== '') this.out.write(CLEAR_LINE);
        destination.write(chunk);
        if (this.line !== '') this.out.write(this.line);
        done();
      },
    });
  }
}

export class LogProgress implements ProgressSink {
  private lastLoggedPages = 0;

  constructor(
    private readonly logger: Logger,
    private readonly everyPages = 100,
  ) {}

  update(snapshot: ProgressSnapshot): void {
    const last = snapshot.pagesDone >= snapshot.pagesPlanned;
    if (!last && snapshot.pagesDone - this.lastLoggedPages < this.everyPages) return;
    if (snapshot.pagesDone === this.lastLoggedPages) return;
    this.lastLoggedPages = snapshot.pagesDone;
    const { rate, etaMs } = describeProgress(snapshot);
    this.logger.info(
      {
        event: 'sync.progress',
        ...snapshot,
        elapsedMs: Math.round(snapshot.elapsedMs),
        usersPerSecond: Math.round(rate),
        etaMs: etaMs === undefined ? null : Math.round(etaMs),
      },
      'sync progress',
    );
  }

  finish(): void {
    this.lastLoggedPages = 0;
  }
}
