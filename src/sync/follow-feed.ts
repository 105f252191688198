/**
 * Incremental following (docs/followers.md): a follower whose last
 * succeeded run reached a cursor of its leader's change feed reads the feed
 * after it (GET /mirror/v1/changes over HTTP, behind the replica's key)
 * instead of listing the whole leader, and applies what changed: each user's
 * last event wins, its record written as the exact bytes the leader holds,
 * its deletion applied as the leader confirmed it. Only the changed users'
 * bytes cross the network.
 *
 * It falls back to the full listing (returns undefined) when it cannot know
 * the leader's state from the feed alone: no cursor yet (the first run, a run
 * after a leader that sent none), the cursor is older than the leader's
 * feed retention or from a file a restore replaced (410), the leader's epoch
 * differs (restored, rebuilt, or another leader: ./leader-check.ts), or
 * the feed holds a `mirror.restored` or `mirror.baseline` event. A stale
 * leader is refused as on the listing path. Every feed page and every record
 * it carries is checked against the run's pinned leader and team
 * (./leader-pin.ts), as the listing's are.
 */
import type { FeedBytes } from '../service/client.js';
import { CHANGES_MAX_LIMIT } from '../service/change-feed-route.js';
import { scanRecordSpans } from '../service/page-spans.js';
import { callWithRetries, type RetryOptions } from '../service/retry.js';
import type { Logger } from 'pino';
import type { RunWriter } from './run-writer.js';
import type { FeedSource } from './source.js';
import { checkLeader } from './leader-check.js';
import type { LeaderPin } from './leader-pin.js';
import { finishPublished, type SyncSummary } from './run-summary.js';
import { NO_CANDIDATES } from '../../db/sync-runs.js';
import { readEvent } from '../../db/change-event.js';

/** Events per feed request: the replica's largest page. */
const FEED_LIMIT = CHANGES_MAX_LIMIT;
const USERS_OPEN = Buffer.from('{"users":[');

export interface FollowOptions {
  source: FeedSource;
  /** The run's leader and team (./leader-pin.ts): `source` checks each answer's leader, the fold each record's team. */
  pin: LeaderPin;
  writer: RunWriter;
  runId: number;
  retry: RetryOptions;
  leaderMaxAgeMs: number;
  maxRecordBytes: number | undefined;
  log: Logger;
  started: number;
}

/** What the feed after the cursor comes to: each changed user's record (null: deleted), or why to list instead. */
type Folded = { changes: Map<string, Buffer | null>; pages: number; events: number; next: number } | { fallback: string };

/** The run, followed from the feed; undefined to list the leader instead; throws what a listing would fail on. */
export async function followFeed(o: FollowOptions): Promise<SyncSummary | undefined> {
  const from = o.writer.store.sources?.followFrom();
  if (from === undefined) return undefined;
  const first = await callWithRetries(`feed after ${from.cursor}`, (sig) => o.source.leaderFeedPage(from.cursor, FEED_LIMIT, sig), o.retry);
  const source = first.source;
  if (source === undefined) return fallback(o, 'the leader sent no freshness headers');
  if (first.gone) return fallback(o, `cursor ${from.cursor} is older than the leader's feed retention, or from a file a restore replaced`);
  if (source.epoch !== from.epoch) return fallback(o, `the leader's epoch changed (${from.epoch} → ${source.epoch})`);
  const refused = checkLeader(o.writer, o.runId, source, o.leaderMaxAgeMs, o.log);
  if (refused !== undefined) throw new LeaderRefused(refused);
  const folded = await fold(o, first, from.cursor);
  if ('fallback' in folded) return fallback(o, folded.fallback);
  o.writer.store.sources?.record(o.runId, { ...source, cursor: folded.next });

  const deletions: string[] = [];
  const records: Buffer[] = [];
  for (const [userId, raw] of folded.changes) {
    if (raw === null) deletions.push(userId);
    else records.push(raw);
  }
  const body = Buffer.concat([USERS_OPEN, ...records.flatMap((r, i) => (i === 0 ? [r] : [Buffer.from(','), r])), Buffer.from(']}')]);
  const scan = scanRecordSpans(body);
  if (!scan.ok) throw new Error(`the leader's feed records do not form a page: ${scan.reason}`);
  o.pin.checkRecords(`the feed after cursor ${from.cursor}`, body, scan.spans);
  o.writer.beginRun(undefined, o.runId);
  const staged = o.writer.stagePage(o.runId, { body, spans: scan.spans }, 0, o.maxRecordBytes);
  o.retry.signal?.throwIfAborted();
  const { repeats: _repeats, conflicts, ...published } = o.writer.publish(o.runId, { deletionsChecked: true, deletions });
  o.log.info(
    {
      event: 'sync.followed_feed',
      runId: o.runId,
      after: from.cursor,
      next: folded.next,
      events: folded.events,
      users: folded.changes.size,
    },
    `followed the leader's feed from cursor ${from.cursor} to ${folded.next}: ${folded.events} event(s), ${folded.changes.size} user(s)`,
  );
  const counts = { ...NO_CANDIDATES, candidates: deletions.length, confirmedGone: deletions.length };
  const summary: SyncSummary = {
    runId: o.runId,
    status: 'succeeded',
    pages: folded.pages,
    pageFailures: 0,
    usersSeen: staged.seen,
    ...published,
    rejected: staged.rejected,
    duplicates: 0,
    identityConflicts: conflicts.count,
    oversizePages: 0,
    ...counts,
    totalAtStart: undefined,
    totalAtEnd: undefined,
    totalLowest: undefined,
    durationMs: Math.round(performance.now() - o.started),
  };
  return finishPublished(o.writer, o.log, summary, counts, conflicts.kept);
}

/** The reason a leader was refused, as the run's failure. */
class LeaderRefused extends Error {}

function fallback(o: FollowOptions, why: string): undefined {
  o.log.info({ event: 'sync.feed_fallback', runId: o.runId, reason: why }, `listing the whole leader: ${why}`);
  return undefined;
}

/** Reads the feed to its head and folds it: per user, its last event. */
async function fold(o: FollowOptions, first: FeedBytes, after: number): Promise<Folded> {
  const changes = new Map<string, Buffer | null>();
  let page: FeedBytes = first;
  let pages = 1;
  let events = 0;
  for (;;) {
    if (page.gone) return { fallback: `the leader's feed dropped events after cursor ${after} while it was read` };
    // The page's events, each cut out as its bytes, walked as the listing's records are.
    const scan = scanRecordSpans(page.body, 'events');
    if (!scan.ok) throw new Error(`the leader's feed page is not valid JSON: ${scan.reason}`);
    if (!scan.hasRecords) throw new Error('the leader\'s feed page is not {"events": [...], "next": N}');
    for (const span of scan.spans) {
      const why = applyEvent(changes, page.body.subarray(span.start, span.end));
      if (why !== undefined) return { fallback: why };
      events++;
    }
    const next = scan.members.next;
    if (typeof next !== 'number' || !Number.isInteger(next)) throw new Error("the leader's feed page has no integer `next`");
    if (scan.spans.length < FEED_LIMIT) return { changes, pages, events, next };
    after = next;
    page = await callWithRetries(`feed after ${after}`, (sig) => o.source.leaderFeedPage(after, FEED_LIMIT, sig), o.retry);
    pages++;
  }
}

/** One event into the fold (db/change-event.ts reads it, beside where it is written); a reason to list the leader instead, for a mirror-wide event. */
function applyEvent(changes: Map<string, Buffer | null>, bytes: Buffer): string | undefined {
  const event = readEvent(bytes);
  // A mirror-wide event: the users' state cannot be folded from the feed across it.
  if (!('userId' in event)) return `the leader's feed holds a ${event.type} event (cursor ${event.cursor})`;
  changes.set(event.userId, event.record);
  return undefined;
}
