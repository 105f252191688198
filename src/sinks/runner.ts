/**
 * One sink's delivery loop: reads the feed (db/change-feed.ts) after the
 * destination's own position, keeps what the filter admits, applies the
 * field policy and appends in cursor order. Nothing is remembered here that
 * the destination does not hold: at start and after every error the
 * position is read back from it, so a kill -9 at any moment loses nothing
 * and repeats nothing the destination would accept.
 *
 * - A destination that is down or refuses holds every event (retried with
 *   a backoff up to 5 s; the failure is `failing`, which `status`, /metrics
 *   and the logs name). Nothing is skipped.
 * - A position behind the feed's retention (events were pruned before this
 *   sink took them) or ahead of the feed (another mirror's events, a
 *   rebuilt file) stops the sink with the reason: it never jumps.
 * - A restore: the feed answers a position the replaced file issued with
 *   the backup's end; the next event is `mirror.restored`, at a cursor above
 *   any the replaced file issued, so the destination's order holds.
 * - A new destination (no position) starts at the oldest event held.
 */
import type { Logger } from 'pino';
import type { ChangeFeed, FeedPage } from '../../db/change-feed.js';
import { logError } from '../runtime/log-error.js';
import { outgoing, admits, teamIdOf, type Destination, type DestinationPosition, type SinkFilter, type SinkKind } from './contract.js';
import type { FieldPolicy } from './field-policy.js';

/** Events read from the feed per page (and appended per round trip at most). */
export const SINK_BATCH = 500;
/** How often a caught-up sink looks for new events: the delivery lag under steady churn is about this. */
const POLL_MS = 200;
const MAX_BACKOFF_MS = 5_000;

export interface SinkIdentity {
  name: string;
  kind: SinkKind;
  filter: SinkFilter;
  policy: FieldPolicy;
}

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

export class SinkRunner {
  private readonly s: SinkState;
  private opened = false;
  private last: DestinationPosition | null = null;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private closed = false;
  private backoffMs = 0;

  constructor(
    private readonly feed: ChangeFeed,
    private readonly sink: SinkIdentity,
    private readonly destination: Destination,
    private readonly log: Logger,
    private readonly onDelivered: (n: number) => void = () => undefined,
  ) {
    this.s = {
      name: sink.name,
      kind: sink.kind,
      where: destination.where,
      policy: sink.policy.id,
      position: null,
      scanned: 0,
      delivered: 0,
      failing: null,
      stopped: null,
    };
  }

  state(): Readonly<SinkState> {
    return this.s;
  }

  /** Starts the loop: a pass now, then every POLL_MS (longer while failing). */
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
    this.running ??= this.deliver().finally(() => (this.running = undefined));
    return this.running;
  }

  private async deliver(): Promise<void> {
    if (this.s.stopped !== null) return;
    try {
      if (!this.opened) await this.openAndPosition();
      if (this.s.stopped !== null) return;
      for (;;) {
        if (this.closed) return;
        const page: FeedPage = this.feed.page(this.s.scanned, SINK_BATCH);
        if (page.gone) {
          if (page.restore !== undefined || this.s.position === null || this.s.position === 0) {
            if (page.restore !== undefined)
              this.log.warn(
                { event: 'sink.feed_restored', sink: this.s.name, position: this.s.scanned, resumeAfter: page.oldest },
                `sink ${this.s.name}: the mirror was restored from a backup; delivering mirror.restored and what follows`,
              );
            this.s.scanned = page.oldest;
            continue;
          }
          this.stop(
            `behind the feed's retention: the destination holds cursor ${this.s.scanned}, the oldest event held follows ${page.oldest}; events were dropped before this sink took them (replay from a point, or empty the destination)`,
          );
          return;
        }
        if (page.events.length === 0) break;
        const out = outgoing(page.events, this.sink.filter, this.sink.policy);
        if (out.length > 0) {
          await this.destination.append(out, this.last);
          const tail = out[out.length - 1];
          if (tail !== undefined) {
            this.last = { cursor: tail.cursor, eventId: tail.id };
            this.s.position = tail.cursor;
          }
          this.s.delivered += out.length;
          this.onDelivered(out.length);
        }
        this.s.scanned = page.next;
      }
      if (this.s.failing !== null)
        this.log.info(
          { event: 'sink.recovered', sink: this.s.name, where: this.s.where, since: this.s.failing.since },
          `sink ${this.s.name}: delivering again`,
        );
      this.s.failing = null;
      this.backoffMs = 0;
    } catch (err) {
      const last = err instanceof Error ? err.message : String(err);
      if (this.s.failing === null)
        logError(
          this.log,
          'error',
          { event: 'sink.failing', sink: this.s.name, where: this.s.where, err },
          `sink ${this.s.name}: ${this.s.where} does not take events; holding them`,
        );
      this.s.failing = { since: this.s.failing?.since ?? new Date().toISOString(), last };
      this.backoffMs = Math.min(MAX_BACKOFF_MS, Math.max(250, this.backoffMs * 2));
      // The next pass reads the position back from the destination: what landed before the error counts, nothing more.
      this.opened = false;
      await this.destination.close().catch(() => undefined);
    }
  }

  private async openAndPosition(): Promise<void> {
    await this.destination.open();
    const pos = await this.destination.position();
    const latest = this.feed.latest();
    this.opened = true;
    this.last = pos;
    this.s.position = pos?.cursor ?? 0;
    this.s.scanned = pos?.cursor ?? 0;
    if (pos !== null && pos.cursor > latest) {
      this.stop(
        `the destination holds cursor ${pos.cursor}, beyond the feed's newest (${latest}): it holds another mirror's events, or this mirror was rebuilt; give the sink a new stream`,
      );
      return;
    }
    if (pos !== null && pos.eventId !== null) {
      const page = this.feed.page(pos.cursor - 1, 1);
      const here = !page.gone ? page.events[0] : undefined;
      if (here !== undefined && here.cursor === pos.cursor && here.id !== pos.eventId)
        this.stop(
          `the destination's last event ${pos.eventId} is not this feed's event at cursor ${pos.cursor} (${here.id}): another mirror's events`,
        );
    }
    this.log.info(
      {
        event: 'sink.started',
        sink: this.s.name,
        kind: this.s.kind,
        where: this.s.where,
        position: this.s.position,
        policy: this.s.policy,
      },
      `sink ${this.s.name}: ${this.s.kind} at ${this.s.where}, from cursor ${this.s.position}`,
    );
  }

  private stop(reason: string): void {
    this.s.stopped = reason;
    this.log.error({ event: 'sink.stopped', sink: this.s.name, where: this.s.where, reason }, `sink ${this.s.name} stopped: ${reason}`);
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

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    await this.running;
    await this.destination.close().catch(() => undefined);
  }
}

/**
 * What a sink has pending after `after`, as its filter sees it: how many
 * events (counting at most `limit` feed events), and when the first was
 * published. For `status`, which reads the position from the destination.
 */
export function pendingAfter(
  feed: ChangeFeed,
  filter: SinkFilter,
  after: number,
  limit = 100_000,
): { events: number; firstAt: string | undefined; gone: boolean; more: boolean } {
  let events = 0;
  let firstAt: string | undefined;
  let seen = 0;
  let cursor = after;
  for (;;) {
    const page = feed.page(cursor, SINK_BATCH);
    if (page.gone) {
      if (page.restore !== undefined || after === 0) {
        cursor = page.oldest;
        continue;
      }
      return { events, firstAt, gone: true, more: false };
    }
    if (page.events.length === 0) return { events, firstAt, gone: false, more: false };
    for (const e of page.events) {
      if (!admits(filter, e.type, e.type.startsWith('mirror.') ? null : teamIdOf(e.body))) continue;
      events++;
      firstAt ??= e.publishedAt;
    }
    seen += page.events.length;
    cursor = page.next;
    if (seen >= limit) return { events, firstAt, gone: false, more: true };
  }
}
