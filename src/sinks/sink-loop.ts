/**
 * What every sink runner shares, whatever its destination: one pass at a
 * time, a pass every POLL_MS while it keeps up and a backoff up to 5 s
 * while its destination fails, the failure named once in the log and kept
 * in its state (which `status`, /metrics and /readyz read), and the feed's
 * retention held at the position its destination last said. A runner says
 * only what a pass does (`work`): ./runner.ts appends events to a log of
 * their own kind, ./postgres/runner.ts keeps a replica of the mirror.
 */
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../db/change-feed.js';
import { logError } from '../runtime/log-error.js';
import type { SinkKind } from './contract.js';

/** How often a caught-up sink looks for new events: the delivery lag under steady churn is about this. */
const POLL_MS = 200;
const MAX_BACKOFF_MS = 5_000;

export interface SinkState {
  name: string;
  kind: SinkKind;
  where: string;
  policy: string;
  /** The destination's last event (its cursor), once read; null before. */
  position: number | null;
  /** Every event up to here was delivered or is not for this sink. */
  scanned: number;
  /** Events appended by this process. */
  delivered: number;
  /** The destination down or refusing (events held): since when, and its last error. */
  failing: { since: string; last: string } | null;
  /** Why the sink stopped for good (behind retention, ahead of the feed); null while it runs. */
  stopped: string | null;
}

export interface SinkLag {
  eventsBehind: number;
  secondsBehind: number;
}

export abstract class SinkLoop {
  protected readonly s: SinkState;
  protected closed = false;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private backoffMs = 0;

  constructor(
    protected readonly feed: ChangeFeed,
    protected readonly log: Logger,
    identity: Pick<SinkState, 'name' | 'kind' | 'where' | 'policy'>,
  ) {
    this.s = { ...identity, position: null, scanned: 0, delivered: 0, failing: null, stopped: null };
  }

  /** One pass: brings the destination up to the feed; records its own success or failure (recovered, failed). */
  protected abstract work(): Promise<void>;

  state(): Readonly<SinkState> {
    return this.s;
  }

  /** Starts the loop: a pass now, then every POLL_MS (longer while failing), until closed or stopped. */
  start(): void {
    const loop = (): void => {
      if (this.closed) return;
      void this.pass().finally(() => {
        if (this.closed || this.s.stopped !== null) return;
        this.timer = setTimeout(loop, this.s.failing === null ? POLL_MS : this.backoffMs);
        this.timer.unref();
      });
    };
    loop();
  }

  /** Delivers what is pending now (one pass at a time); resolves when caught up or failed. */
  pass(): Promise<void> {
    this.running ??= this.work().finally(() => (this.running = undefined));
    return this.running;
  }

  /** A pass that reached the feed's end: a failure before it is over. */
  protected recovered(): void {
    if (this.s.failing !== null)
      this.log.info(
        { event: 'sink.recovered', sink: this.s.name, where: this.s.where, since: this.s.failing.since },
        `sink ${this.s.name}: delivering again`,
      );
    this.s.failing = null;
    this.backoffMs = 0;
  }

  /** A pass that failed: logged once per outage (`what` says what the destination does not take), then retried with a growing pause. */
  protected failed(err: unknown, what: string): void {
    if (this.s.failing === null)
      logError(
        this.log,
        'error',
        { event: 'sink.failing', sink: this.s.name, where: this.s.where, err },
        `sink ${this.s.name}: ${this.s.where} does not take ${what}; holding them`,
      );
    this.s.failing = { since: this.s.failing?.since ?? new Date().toISOString(), last: err instanceof Error ? err.message : String(err) };
    this.backoffMs = Math.min(MAX_BACKOFF_MS, Math.max(250, this.backoffMs * 2));
  }

  /** Stops the loop; returns the pass in flight, if any, for the runner to wait on as it sees fit. */
  protected halt(): Promise<void> | undefined {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    return this.running;
  }

  /** How far behind the feed: events not yet looked at, and since the first of them was published. */
  lag(now: Date): SinkLag {
    const eventsBehind = Math.max(0, this.feed.latest() - this.s.scanned);
    if (eventsBehind === 0) return { eventsBehind: 0, secondsBehind: 0 };
    const at = this.feed.publishedAfter(this.s.scanned);
    return { eventsBehind, secondsBehind: at === undefined ? 0 : Math.max(0, Math.round((now.getTime() - Date.parse(at)) / 1000)) };
  }

  /** What retention may drop for this sink: up to what its destination holds; nothing while that is unknown. */
  hold(): number {
    return this.s.position ?? 0;
  }
}
