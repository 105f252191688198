/**
 * A follower's check of its leader (docs/followers.md): a mirror configured
 * as a follower (SYNC_FOLLOW_LEADER) reads the leader's freshness on the
 * run's first answer (src/service/source-freshness.ts) and follows it only
 * when what it serves is true now. Otherwise the run publishes nothing: no
 * creation, no update, no deletion and no history, since every one of them
 * would be dated by the follower's publish and claim a state the service may
 * no longer be in. Every later answer of the run must come from that same
 * leader (./leader-pin.ts).
 *
 * Refused, with the reason in the run's row, the summary and a warn line:
 * - `stale`: the leader's data was read from the service longer ago than
 *   SYNC_LEADER_MAX_AGE_MS (unset: two SYNC_CRON intervals). Its 404s would
 *   confirm deletions of users merely created after it stopped.
 * - `restored`: the leader was restored from a backup and has not published
 *   a sync since: it serves the backup's past.
 *
 * A leader of another epoch than the previous run's (restored and re-synced,
 * or rebuilt, or another leader behind the same address) is not refused for
 * that alone: judged as above, it is as true as any, and a refusal that
 * depended on which leader answered the previous run first would flip from
 * run to run. It is logged (`sync.leader_lineage`), and the follower lists it
 * whole (its feed cursor belongs to the other epoch: ./follow-feed.ts).
 */
import type { SourceFreshness } from '../service/source-freshness.js';
import type { RunWriter } from './run-writer.js';
import type { Logger } from 'pino';

export type LeaderVerdict = { follow: true } | { follow: false; kind: 'stale' | 'restored'; reason: string };

/** Pure: whether a run may follow the leader that sent `now`. */
export function judgeLeader(now: SourceFreshness, nowMs: number, maxAgeMs: number): LeaderVerdict {
  if (now.restoredAt !== undefined && now.publishedAt < now.restoredAt) {
    return refuse(
      'restored',
      `leader was restored from a backup at ${now.restoredAt} and has not published a sync since (last publish ${now.publishedAt})`,
    );
  }
  const ageMs = nowMs - Date.parse(now.sourceAt);
  if (!(ageMs <= maxAgeMs)) {
    const age = Math.round(Math.max(0, ageMs) / 1000);
    return refuse(
      'stale',
      `leader is stale: its data was read from the service at ${now.sourceAt} (${age} s ago), more than SYNC_LEADER_MAX_AGE_MS (${Math.round(maxAgeMs / 1000)} s)`,
    );
  }
  return { follow: true };
}

function refuse(kind: 'stale' | 'restored', why: string): LeaderVerdict {
  return { follow: false, kind, reason: `${why}; nothing published, nothing deleted` };
}

/** Records the leader with the run and judges it; the refusal's reason, or undefined to follow. */
export function checkLeader(writer: RunWriter, runId: number, source: SourceFreshness, maxAgeMs: number, log: Logger): string | undefined {
  const sources = writer.store.sources;
  const before = sources?.last();
  sources?.record(runId, source);
  if (before !== undefined && before.epoch !== source.epoch) {
    log.info(
      { event: 'sync.leader_lineage', runId, before: before.epoch, epoch: source.epoch, restoredAt: source.restoredAt },
      `the leader is of another epoch than the previous run's (${before.epoch} → ${source.epoch}): restored, rebuilt or another leader; listing it whole`,
    );
  }
  const verdict = judgeLeader(source, Date.now(), maxAgeMs);
  if (verdict.follow) return undefined;
  log.warn({ event: 'sync.leader_refused', runId, kind: verdict.kind, leader: source }, `not following the leader: ${verdict.reason}`);
  return verdict.reason;
}
