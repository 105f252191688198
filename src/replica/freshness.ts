/**
 * How fresh the replica's answer is, decided from the mirror's sync runs:
 * the headers every answer that read the mirror carries, and readiness.
 *
 *   X-Mirror-Synced-At  when the latest succeeded (complete) sync finished
 *   X-Mirror-Run-Id     the latest run that published (succeeded or partial):
 *                       the state of the mirror the answer was read from
 *   Warning             `110 - "Response is Stale"` (RFC 7234) when that
 *                       succeeded sync is older than REPLICA_MAX_STALENESS_S
 *
 * A mirror that never completed a sync serves nothing (503): its 404s would
 * claim users do not exist.
 */
import type { Freshness } from '../../db/replica-reader.js';

export const STALE_WARNING = '110 - "Response is Stale"';

export interface FreshnessVerdict {
  /** False when no sync ever succeeded: data routes answer 503. */
  serving: boolean;
  /** Serving and not past the max staleness: /readyz says 200. */
  ready: boolean;
  /** Flat header list (name, value, …) for `writeHead`. */
  headers: string[];
  ageSeconds: number | undefined;
  reason: string;
}

export function judgeFreshness(f: Freshness, nowMs: number, maxStalenessMs: number): FreshnessVerdict {
  if (f.syncedAt === null || f.runId === null) {
    return { serving: false, ready: false, headers: [], ageSeconds: undefined, reason: 'the mirror has not completed a sync yet' };
  }
  const ageMs = Math.max(0, nowMs - Date.parse(f.syncedAt));
  const headers = ['x-mirror-synced-at', f.syncedAt, 'x-mirror-run-id', String(f.runId)];
  const stale = !(ageMs <= maxStalenessMs);
  if (stale) headers.push('warning', STALE_WARNING);
  return {
    serving: true,
    ready: !stale,
    headers,
    ageSeconds: Math.round(ageMs / 1000),
    reason: stale ? `the last succeeded sync is older than ${Math.round(maxStalenessMs / 1000)} s` : 'ok',
  };
}
