/**
 * A follower trusts one leader, on every answer (docs/followers.md). A run
 * of a mirror configured as a follower (SYNC_FOLLOW_LEADER) pins the leader
 * that gave its first answer: its change-feed epoch and its last restore
 * (x-mirror-epoch, x-mirror-restored-at), and the team its users belong to.
 * Every answer the run uses after that (list pages, feed pages, the
 * deletion checks' resolves, their 404s included) must come from that same
 * leader and carry only that team's users; one that does not ends the run
 * `failed`: nothing staged is published, nothing deleted, no event.
 *
 * Why the whole run and not just the answer: an answer from another leader
 * (restored from a backup in the middle of the scan, a second leader behind
 * the same load balancer, another team's mirror) shows that some of the
 * answers already staged may be that leader's too, and its 404s would
 * confirm deletions of users the true leader still has.
 *
 * An answer with no freshness headers at all (a gateway that strips
 * x-mirror-*) is refused the same way: a configured follower cannot tell its
 * leader from any other without them.
 *
 * The team: SYNC_FOLLOW_TEAM when set; otherwise the team of the mirror's
 * own active users (a mirror that holds users of two teams must be told
 * which); otherwise, on a mirror with no user yet, the team of the first
 * record the run reads.
 */
import { LeaderUntrusted, type SourceFreshness } from '../service/source-freshness.js';
import type { RecordSpan } from '../service/page-spans.js';
import type { ResolveResult } from '../service/client.js';
import type { DirectorySource, FeedSource } from './source.js';

const NOTHING = 'nothing published, nothing deleted';

/** A mirror not configured as a follower whose SERVICE_BASE_URL answers as a mirror's replica: refused, never followed unchecked. */
export const UNCONFIGURED_LEADER =
  "SERVICE_BASE_URL answers as another mirror's replica (x-mirror-* headers), and this mirror is not configured to follow one: " +
  `set SYNC_FOLLOW_LEADER=1 to follow it, every answer checked (docs/followers.md); ${NOTHING}`;

/** The team a run pins, and where it comes from (for the reason); or why the run cannot start. */
export type TeamPin = { team: string | undefined; from: string } | { refused: string };

/** Pure: the team a follower's run keeps to, from the setting or the mirror's own users. */
export function pinTeam(configured: string | undefined, mirrorTeams: readonly string[]): TeamPin {
  if (configured !== undefined) return { team: configured.toLowerCase(), from: 'SYNC_FOLLOW_TEAM' };
  const [only, other] = mirrorTeams;
  if (only === undefined) return { team: undefined, from: "the leader's first record" };
  if (other === undefined) return { team: only.toLowerCase(), from: "this mirror's users" };
  return {
    refused:
      `this mirror holds users of more than one team (${only}, ${other}): set SYNC_FOLLOW_TEAM to the team ` +
      `this follower mirrors; ${NOTHING}`,
  };
}

/** Pure: how the leader that sent `now` differs from the one the run pinned; undefined when it is the same leader. */
export function leaderChange(pinned: SourceFreshness, now: SourceFreshness): string | undefined {
  const changes: string[] = [];
  if (now.epoch !== pinned.epoch) changes.push(`epoch ${pinned.epoch} → ${now.epoch}`);
  if (now.restoredAt !== pinned.restoredAt) changes.push(`restored at ${pinned.restoredAt ?? 'never'} → ${now.restoredAt ?? 'never'}`);
  return changes.length === 0 ? undefined : changes.join(', ');
}

/** One run's pin: set by its first answer, checked on every other. */
export class LeaderPin {
  private leader: SourceFreshness | undefined;
  private team: string | undefined;
  private teamBytes: Buffer | undefined;
  private teamFrom: string;

  constructor(team: { team: string | undefined; from: string }) {
    this.teamFrom = team.from;
    if (team.team !== undefined) this.setTeam(team.team);
  }

  /** The answer's freshness, if it is the pinned leader's (the first answer pins it); throws LeaderUntrusted. */
  check(what: string, source: SourceFreshness | undefined): SourceFreshness {
    if (source === undefined) {
      throw new LeaderUntrusted(
        `${what} carried no x-mirror-* freshness headers: SYNC_FOLLOW_LEADER is set, and a leader that does not say ` +
          `which it is cannot be followed (a proxy or gateway stripping them?); ${NOTHING}`,
      );
    }
    if (this.leader === undefined) {
      this.leader = source;
      return source;
    }
    const change = leaderChange(this.leader, source);
    if (change !== undefined) {
      throw new LeaderUntrusted(
        `leader changed during the run: ${what} came from another leader than the run's first answer (${change}): ` +
          `restored or rebuilt while it was read, or two leaders behind one address; ${NOTHING}`,
      );
    }
    return source;
  }

  /** Every record of a page is of the pinned team (the first one pins it when none is); throws LeaderUntrusted. */
  checkRecords(what: string, body: Buffer, spans: readonly RecordSpan[]): void {
    for (const span of spans) {
      const at = span.teamAt ?? -1;
      const end = span.teamEnd ?? -1;
      const pinned = this.teamBytes;
      // The common case: the team's bytes as pinned, compared in place.
      if (at >= 0 && pinned !== undefined && end - at === pinned.length && body.compare(pinned, 0, pinned.length, at, end) === 0) continue;
      const team = at >= 0 ? body.toString('utf8', at, end) : parsedTeam(body, span);
      // No string team_id: the record is invalid, and the sync rejects it without storing it.
      if (team !== undefined) this.checkTeam(what, team);
    }
  }

  /** A resolve answer: the pinned leader's, and a found user of the pinned team; throws LeaderUntrusted. */
  checkResolve(what: string, result: ResolveResult): void {
    this.check(what, result.source);
    if (result.found) this.checkTeam(what, result.user.team_id);
  }

  private checkTeam(what: string, team: string): void {
    const lower = team.toLowerCase();
    if (this.team === undefined) {
      this.setTeam(lower);
      return;
    }
    if (lower === this.team) return;
    throw new LeaderUntrusted(
      `${what} holds a user of team ${team}, not of team ${this.team} (from ${this.teamFrom}): the leader at ` +
        `SERVICE_BASE_URL mirrors another team; ${NOTHING}`,
    );
  }

  private setTeam(team: string): void {
    this.team = team;
    this.teamBytes = Buffer.from(team, 'utf8');
    if (this.teamFrom === "the leader's first record") this.teamFrom = "the run's first record";
  }
}

/** A record's team_id when the scan could not find it as a plain string: undefined unless it parses to one. */
function parsedTeam(body: Buffer, span: RecordSpan): string | undefined {
  try {
    const record = JSON.parse(body.toString('utf8', span.start, span.end)) as { team_id?: unknown } | null;
    return typeof record?.team_id === 'string' ? record.team_id : undefined;
  } catch {
    return undefined;
  }
}

/** `source`, every answer of it checked against `pin` before the run uses it. */
export function pinnedSource(source: DirectorySource, pin: LeaderPin): DirectorySource {
  return {
    async listUserRecords(params, signal) {
      const page = await source.listUserRecords(params, signal);
      const what = `the list page at offset ${params.offset}`;
      pin.check(what, page.source);
      pin.checkRecords(what, page.body, page.spans);
      return page;
    },
    async resolveUser(clientUserId, signal) {
      const result = await source.resolveUser(clientUserId, signal);
      // No client_user_id in the reason: it is stored with the run and shown by `status`.
      pin.checkResolve(`a deletion check's resolve (${result.found ? 'found' : '404'})`, result);
      return result;
    },
  };
}

/** The leader's feed, every page's leader checked against `pin` (its records are checked by the fold, ./follow-feed.ts). */
export function pinnedFeed(feed: FeedSource, pin: LeaderPin): FeedSource {
  return {
    async leaderFeedPage(after, limit, signal) {
      const page = await feed.leaderFeedPage(after, limit, signal);
      pin.check(`the feed page after cursor ${after}`, page.source);
      return page;
    },
  };
}
