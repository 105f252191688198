/**
 * A webhook replay (`user-mirror sinks replay <name>`, jobs/WEBHOOKS.md):
 * events the queue already had, handed to it again from a point, after the
 * jobs then waiting. Delivery stays at least once: the receiver gets each
 * event again with its own `webhook-id` (the event id), so one that
 * deduplicates on it must let a replay through (docs/sinks.md).
 *
 * - Job id `<event_id>.replay-<n>`: the event id is taken by the event's
 *   first job (kept among the completed, where it makes a re-enqueue a
 *   no-op), and BullMQ reserves `:` in custom ids. `n` counts the queue's
 *   replays (`<prefix>:<queue>:replays`), so a second replay of the same
 *   event is a job of its own.
 * - Data as any webhook job plus `replay: n`, which the order guard
 *   (./earlier-jobs.ts) reads: a replayed event waiting behind a later one
 *   is not an earlier event stalled in front of it.
 * - The cursors stay as they were: `dispatched` is not touched (a replay
 *   re-sends events up to `settled`, never past it: later ones are still
 *   to be sent), and `settled` only ever rises, so a replayed job's lower
 *   cursor leaves it, and the feed's retention hold, where they were.
 * - The replay is recorded in `<prefix>:<queue>:replay` (`ReplayRecord`),
 *   read by `readReplay` for `user-mirror sinks`.
 */
import { z } from 'zod';
import type { FeedEvent } from '../../db/change-feed.js';
import { checkWebhookJob, WEBHOOK_JOB, webhookJobOptions, type WebhookJobData } from './contract.js';
import { readJsonKey } from './delivery-state.js';
import type { WebhookQueue } from './queue-handle.js';

/** The id of event `eventId`'s job in replay `n`. */
function replayJobId(eventId: string, n: number): string {
  return `${eventId}.replay-${n}`;
}

const ReplayRecordSchema = z.object({
  replay: z.number().int().positive(),
  /** The first cursor re-sent, and the last (the settled cursor when the replay began). */
  from: z.number().int().nonnegative(),
  through: z.number().int().nonnegative(),
  events: z.number().int().nonnegative(),
  at: z.string(),
});
export type ReplayRecord = z.output<typeof ReplayRecordSchema>;

/** Draws the queue's next replay number (1, 2, …). */
export async function nextReplayNumber(queue: WebhookQueue): Promise<number> {
  return queue.redis.incr(queue.toKey('replays'));
}

/** Hands `events` (cursor order) to the queue again as replay `n`, in one round trip. Returns how many. */
export async function enqueueReplay(queue: WebhookQueue, events: readonly FeedEvent[], n: number, retentionDays: number): Promise<number> {
  const jobs = [...events]
    .sort((a, b) => a.cursor - b.cursor)
    .map((e) => {
      const data: WebhookJobData = { cursor: e.cursor, event_id: e.id, user_id: e.userId, replay: n };
      const checked = checkWebhookJob(WEBHOOK_JOB, data);
      if (!checked.ok) throw new Error(`event at cursor ${e.cursor} cannot be replayed: ${checked.reason}`);
      return { name: WEBHOOK_JOB, data, opts: webhookJobOptions(replayJobId(e.id, n), retentionDays) } as const;
    });
  if (jobs.length > 0) await queue.addBulk(jobs);
  return jobs.length;
}

/** Records replay `record.replay` as the queue's latest. */
export async function recordReplay(queue: WebhookQueue, record: ReplayRecord): Promise<void> {
  await queue.redis.set(queue.toKey('replay'), JSON.stringify(record));
}

/** The queue's latest replay, or null (none, or an unreadable record). */
export function readReplay(queue: WebhookQueue): Promise<ReplayRecord | null> {
  return readJsonKey(queue.redis, queue.toKey('replay'), ReplayRecordSchema);
}

/** How many of replay `n`'s jobs are still to be delivered (waiting, active or retrying). */
export async function replayPending(queue: WebhookQueue, n: number): Promise<number> {
  const jobs = await queue.getJobs(['active', 'wait', 'prioritized', 'delayed'], 0, -1, true);
  return jobs.filter((j) => (j.data as Partial<WebhookJobData> | undefined)?.replay === n).length;
}
