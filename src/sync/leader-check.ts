/**
 * A follower's check of its leader (docs/followers.md): a mirror whose
 * SERVICE_BASE_URL is another mirror's replica reads the leader's freshness
 * on the first page (src/service/source-freshness.ts) and follows it only
 * when what it serves is true now. Otherwise the run publishes nothing: no
 * creation, no update, no deletion and no history, since every one of them
 * would be dated by the follower's publish and claim a state the service may
 * no longer be in.
 *
 * Refused, with the reason in the run's row, the summary and a warn line:
 * - `stale`: the leader's data was read from the service longer ago than
 *   SYNC_LEADER_MAX_AGE_MS (unset: two SYNC_CRON intervals). Its 404s would
 *   confirm deletions of users merely created after it stopped.
 * - `restored`: the leader was restored from a backup and has not published
 *   a sync since: it serves the backup's past.
 * - `epoch`: the leader's epoch is not the one the follower's last run saw:
 *   it was restored or rebuilt in between. Refused once, noticed; the next run
 *   follows the leader's new lineage (the epoch it recorded) if it is fresh.
 */
import type { SourceFreshness } from '../service/source-freshness.js';
import type { RunWriter } from './run-writer.js';
import type { Logger } from 'pino';

export type LeaderVerdict = { follow: true } | { follow: false; kind: 'stale' | 'restored' | 'epoch'; reason: string };

/** Pure: whether a run may follow the leader that sent `now` (the previous run saw `before`). */
export function judgeLeader(now: SourceFreshness, before: SourceFreshness | undefined, nowMs: number, maxAgeMs: number): LeaderVerdict {
  if (before !== undefined && before.epoch !== now.epoch) {
    const restored = now.restoredAt === undefined ? 'rebuilt' : `restored at ${now.restoredAt}`;
    return refuse(
      'epoch',
      `leader's epoch changed (${before.epoch} → ${now.epoch}): it was ${restored}; this run follows nothing, the next one follows its new lineage`,
    );
  }
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

function refuse(kind: 'stale' | 'restored' | 'epoch', why: string): LeaderVerdict {
  return { follow: false, kind, reason: `${why}; nothing published, nothing deleted` };
}

/** Records the leader with the run and judges it; the refusal's reason, or undefined to follow. */
export function checkLeader(writer: RunWriter, runId: number, source: SourceFreshness, maxAgeMs: number, log: Logger): string | undefined {
  const sources = writer.store.sources;
  const before = sources?.last();
  sources?.record(runId, source);
  const verdict = judgeLeader(source, before, Date.now(), maxAgeMs);
  if (verdict.follow) return undefined;
  log.warn({ event: 'sync.leader_refused', runId, kind: verdict.kind, leader: source }, `not following the leader: ${verdict.reason}`);
  return verdict.reason;
}
