/**
 * The sync's view of its upstream: what a run reads, and nothing of how.
 *
 * Every run reads a directory: list pages, and one user resolved to settle
 * a deletion candidate. That is the service, or for a follower a leader
 * mirror's replica (docs/followers.md), which answers the same routes.
 * A follower's run is also handed its leader's change feed, as its own
 * object (the engine's `follow.feed`), never as an optional method of the
 * directory: a wrapper of the directory (tracing, the leader pin) that
 * forgot to pass such a method on would make every follower list the whole
 * leader without a word, and did once.
 *
 * ServiceClient satisfies both; naming the methods keeps the engine
 * testable against anything that speaks them. Types only: the files of the
 * sync import their upstream from here, and this file imports none of
 * theirs, so none of them is reached by a circle through another.
 */
import type { FeedBytes, PageParams, RecordPage, ResolveResult } from '../service/client.js';

/** The directory a run lists (./scan.ts) and checks its deletion candidates against (./deletions.ts). */
export interface DirectorySource {
  listUserRecords(params: PageParams, signal?: AbortSignal): Promise<RecordPage>;
  resolveUser(clientUserId: string, signal?: AbortSignal): Promise<ResolveResult>;
}

/** A leader mirror's change feed, which a follower's run tails after its cursor (./follow-feed.ts). */
export interface FeedSource {
  leaderFeedPage(after: number, limit: number, signal?: AbortSignal): Promise<FeedBytes>;
}
