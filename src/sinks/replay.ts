/**
 * `user-mirror sinks replay <name> --from <cursor> | --since <time>`: what
 * a replay does, per kind (docs/sinks.md, "Replay"). At least once: events
 * from the point on are sent again, whatever the destination had.
 *
 * - The point is checked against the feed first: one older than its
 *   retention (events after it were dropped) or beyond its newest event is
 *   refused, with the oldest point it can take.
 * - Redis Streams and JetStream hold the position themselves, by id (entry
 *   `<cursor>-0`; Nats-Msg-Id and the expected last id): they refuse an
 *   event they hold, and re-appending under other ids would break the
 *   id = cursor rule every consumer relies on. So a destination that still
 *   holds the events from the point is not written to: the command says how
 *   a consumer re-reads them there (XRANGE, XGROUP SETID; a JetStream
 *   consumer from a start sequence). One that lost them (its position is
 *   below the point: the stream was deleted or recreated) needs nothing:
 *   the runner re-sends from its position by itself. One that holds the
 *   position but trimmed the events is named, with the remedy.
 * - A webhook queue gets the events again as jobs of their own
 *   (jobs/webhooks/replay.ts), after those waiting, up to what its worker
 *   has settled (later ones are still to be sent): `replayWebhookQueue`
 *   takes the queue, so any webhook sink's queue can be replayed.
 */
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../db/change-feed.js';
import { readSettled } from '../../jobs/webhooks/delivery-state.js';
import type { WebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { enqueueReplay, nextReplayNumber, recordReplay, type ReplayRecord } from '../../jobs/webhooks/replay.js';
import type { Destination } from './contract.js';
import { SINK_BATCH } from './runner.js';

/** Where a replay starts: at a cursor, or at the first event published at or after a time (ISO). */
export type ReplayPoint = { from: number } | { since: string };

export type ReplayStart = { ok: true; from: number } | { ok: false; problem: string };

/** The first cursor to re-send for `point`, or why the feed cannot take it (naming the argument). */
export function replayStart(feed: ChangeFeed, point: ReplayPoint): ReplayStart {
  const { latest } = feed.bounds();
  let after: number;
  let arg: string;
  if ('from' in point) {
    arg = `--from ${point.from}`;
    if (point.from > latest) return { ok: false, problem: `${arg}: beyond the feed's newest event (cursor ${latest}): nothing to re-send` };
    after = point.from - 1;
  } else {
    arg = `--since ${point.since}`;
    const before = feed.lastCursorBefore(point.since);
    const { prunedThrough, oldestAt } = feed.bounds();
    // None held before the time, and retention dropped some: those may have followed it.
    if (before === null && prunedThrough > 0)
      return {
        ok: false,
        problem: `${arg}: older than the feed's retention: events through cursor ${prunedThrough} were dropped; the oldest held was published at ${oldestAt ?? '?'} (--since that, or --from ${prunedThrough + 1})`,
      };
    after = before ?? 0;
    if (after >= latest) return { ok: false, problem: `${arg}: no event was published since then (the newest is cursor ${latest})` };
  }
  const page = feed.page(after, 1);
  if (page.gone) {
    const why =
      page.restore === undefined
        ? `older than the feed's retention: events through cursor ${page.oldest} were dropped`
        : `from the file a restore replaced: events after cursor ${page.oldest} up to it are not in this feed`;
    return { ok: false, problem: `${arg}: ${why}; the oldest point it can re-send from is --from ${page.oldest + 1}` };
  }
  const first = page.events[0];
  if (first === undefined) return { ok: false, problem: `${arg}: no event held from there on` };
  return { ok: true, from: first.cursor };
}

export type DestinationReplay =
  /** The destination holds the events from the point: a consumer re-reads them there (`how`). */
  | { outcome: 'reread'; position: number; how: string[] }
  /** Its position is below the point: the sink delivers from there by itself. */
  | { outcome: 'behind'; position: number }
  /** It holds the position past the point but no longer the events (trimmed): named, with the remedy. */
  | { outcome: 'trimmed'; position: number; oldest: number | null };

/** What a replay from `from` means for a destination that holds its position by id (opened). */
export async function replayDestination(destination: Destination, from: number): Promise<DestinationReplay> {
  const position = (await destination.position())?.cursor ?? 0;
  if (position < from) return { outcome: 'behind', position };
  const hint = await destination.rereadFrom(from);
  if (hint.oldest === null || hint.oldest > from) return { outcome: 'trimmed', position, oldest: hint.oldest };
  return { outcome: 'reread', position, how: hint.how };
}

/**
 * Re-sends the feed's events from cursor `from` up to the queue's settled
 * cursor as one replay, recorded and logged: later ones are still in the
 * queue (or not yet dispatched) and go in turn, so they are not doubled.
 * Returns the record (events 0 when the worker has not settled `from` yet:
 * it sends it anyway).
 */
export async function replayWebhookQueue(
  feed: ChangeFeed,
  queue: WebhookQueue,
  from: number,
  retentionDays: number,
  log: Logger,
  sink: string,
): Promise<ReplayRecord> {
  const through = await readSettled(queue);
  const at = new Date().toISOString();
  if (through < from) return { replay: 0, from, through, events: 0, at };
  const replay = await nextReplayNumber(queue);
  let after = from - 1;
  let events = 0;
  while (after < through) {
    const page = feed.page(after, SINK_BATCH);
    if (page.gone) throw new Error(`events after cursor ${after} were dropped by the feed's retention during the replay`);
    const batch = page.events.filter((e) => e.cursor <= through);
    if (batch.length === 0) break;
    events += await enqueueReplay(queue, batch, replay, retentionDays);
    after = batch[batch.length - 1]?.cursor ?? through;
  }
  const record: ReplayRecord = { replay, from, through, events, at };
  await recordReplay(queue, record);
  log.info(
    { event: 'sink.replay', sink, kind: 'webhook', ...record },
    `sink ${sink}: replay ${replay} queued ${events} events, cursors ${from}-${through}`,
  );
  return record;
}
