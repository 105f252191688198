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
import { outgoing, admits, teamIdOf, type Destination, type DestinationPosition, type SinkFilter, type SinkKind } from './contract.js';
import type { FieldPolicy } from './field-policy.js';
import { SinkLoop } from './sink-loop.js';

/** Events read from the feed per page (and appended per round trip at most). */
export const SINK_BATCH = 500;

export interface SinkIdentity {
  name: string;
  kind: SinkKind;
  filter: SinkFilter;
  policy: FieldPolicy;
}

export class SinkRunner extends SinkLoop {
  private opened = false;
  private last: DestinationPosition | null = null;

  constructor(
    feed: ChangeFeed,
    private readonly sink: SinkIdentity,
    private readonly destination: Destination,
    log: Logger,
    private readonly onDelivered: (n: number) => void = () => undefined,
  ) {
    super(feed, log, { name: sink.name, kind: sink.kind, where: destination.where, policy: sink.policy.id });
  }

  protected work(): Promise<void> {
    return this.deliver();
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
      this.recovered();
    } catch (err) {
      this.failed(err, 'events');
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

  async close(): Promise<void> {
    await this.halt();
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
