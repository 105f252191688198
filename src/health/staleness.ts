/**
 * Staleness: the mirror's last complete refresh (a succeeded run) is older
 * than SYNC_STALE_AFTER_MS, or there never was one. /readyz, `status` and
 * /metrics all decide it here, so they never disagree.
 *
 * The default threshold is three schedule intervals: one missed or failed
 * tick is noise (the next tick is the retry), three in a row need a human.
 * A partial run does not count as a refresh (it publishes no deletions), so
 * a mirror that only ever ends partial goes stale too, with the reason.
 *
 * The reason names what went wrong since the last success: the newest failed
 * or partial run's recorded error, and a run still marked running (a stuck
 * one is exactly what an operator needs to see).
 */
import type { MirrorReader, RunHistory, SyncRun } from '../../db/mirror-reader.js';

const DEFAULT_STALE_INTERVALS = 3;

/** SYNC_STALE_AFTER_MS when set, else three schedule intervals. */
export function staleAfterMs(configured: number | undefined, scheduleIntervalMs: number): number {
  return configured ?? DEFAULT_STALE_INTERVALS * scheduleIntervalMs;
}

/** A run since the last success that did not succeed (yet). */
export interface RunTrouble {
  runId: number;
  status: 'failed' | 'partial' | 'running';
  /** Finished at, or started at for a running one (ISO 8601). */
  at: string;
  /** sync_runs.error or sweep_skipped_reason; null for a running one. */
  reason: string | null;
}

export interface StalenessFacts {
  lastSucceededAt: Date | undefined;
  /** The newest failed or partial run after the last success. */
  lastProblem: RunTrouble | undefined;
  /** The newest run, if it is still marked running. */
  running: RunTrouble | undefined;
  /** On a follower: when its last succeeded run's data was read from the service, at the source (docs/followers.md). */
  sourceAt?: Date | undefined;
  now: Date;
  staleAfterMs: number;
}

export interface Staleness {
  stale: boolean;
  /** Since the last succeeded run finished; null if there never was one. */
  ageSeconds: number | null;
  /** On a follower: the age of its data at the source (the leader's read of the service); null elsewhere. */
  sourceAgeSeconds: number | null;
  staleAfterSeconds: number;
  /** One line on why, when stale; null when fresh. */
  reason: string | null;
}

export function assessStaleness(f: StalenessFacts): Staleness {
  const ageMs = f.lastSucceededAt === undefined ? undefined : Math.max(0, f.now.getTime() - f.lastSucceededAt.getTime());
  const staleAfterSeconds = Math.round(f.staleAfterMs / 1000);
  const ageSeconds = ageMs === undefined ? null : Math.round(ageMs / 1000);
  const sourceAgeMs = f.sourceAt === undefined ? undefined : Math.max(0, f.now.getTime() - f.sourceAt.getTime());
  const sourceAgeSeconds = sourceAgeMs === undefined ? null : Math.round(sourceAgeMs / 1000);
  const ownStale = ageMs === undefined || ageMs > f.staleAfterMs;
  const sourceStale = sourceAgeMs !== undefined && sourceAgeMs > f.staleAfterMs;
  const stale = ownStale || sourceStale;
  if (!stale) return { stale, ageSeconds, staleAfterSeconds, sourceAgeSeconds, reason: null };
  if (!ownStale && f.sourceAt !== undefined) {
    // The follower ran, but what it copied was already old: the staleness comes from its leader.
    const at = f.sourceAt.toISOString();
    const why = `source: the leader's data was read from the service at ${at}, ${formatAge(sourceAgeSeconds ?? 0)} ago, more than SYNC_STALE_AFTER_MS (${formatAge(staleAfterSeconds)}): the leader at SERVICE_BASE_URL is stale`;
    const trouble = [describeTrouble(f.lastProblem), describeTrouble(f.running)].filter((x): x is string => x !== undefined);
    return { stale, ageSeconds, staleAfterSeconds, sourceAgeSeconds, reason: [why, ...trouble].join('; ') };
  }
  const age =
    ageSeconds === null
      ? 'never synced successfully'
      : `last successful sync ${formatAge(ageSeconds)} ago, more than SYNC_STALE_AFTER_MS (${formatAge(staleAfterSeconds)})`;
  const why = [age, describeTrouble(f.lastProblem), describeTrouble(f.running)].filter((x): x is string => x !== undefined);
  if (f.lastProblem === undefined && f.running === undefined) why.push('no sync has run since');
  return { stale, ageSeconds, staleAfterSeconds, sourceAgeSeconds, reason: why.join('; ') };
}

function describeTrouble(t: RunTrouble | undefined): string | undefined {
  if (t === undefined) return undefined;
  if (t.status === 'running') return `run #${t.runId} running since ${t.at}`;
  return `last ${t.status} run #${t.runId} (${t.at}): ${oneLine(t.reason ?? 'no reason recorded', 300)}`;
}

/** An age for people: seconds up to two minutes, then minutes, hours, days. */
export function formatAge(seconds: number): string {
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7_200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.round(seconds / 3_600)}h`;
  return `${Math.round(seconds / 86_400)}d`;
}

/** Stored errors may carry newlines or escapes and run long; a report row is one short line. */
export function oneLine(text: string, max = 200): string {
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  const flat = text.replace(/[\u0000-\u001f\u007f]/g, ' ');
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

/**
 * What the daemon needs to know about the mirror's contents: its size, when
 * it was last completely refreshed, and what went wrong since. "Completely"
 * is a succeeded run: a partial one publishes changes but no deletions (see
 * src/sync/engine.ts). Freshness alone is read on every /readyz and at
 * start-up; the size (two counts over `users`, not free on a large mirror)
 * only where it is shown: scrapes and `status`.
 */
export interface MirrorFigures {
  activeUsers: number;
  deletedUsers: number;
  /** Finish time of the last succeeded run. */
  lastSucceededAt: Date | undefined;
  /** The newest failed or partial run since then. */
  lastProblem: RunTrouble | undefined;
  /** The newest run, while it is marked running. */
  running: RunTrouble | undefined;
  /** On a follower: when the data of its last succeeded run was read from the service (db/run-source.ts). */
  sourceAt?: Date;
  /** On a follower: the leader's epoch its latest run saw. */
  sourceEpoch?: string;
}

export type MirrorFreshness = Omit<MirrorFigures, 'activeUsers' | 'deletedUsers'>;

export function mirrorFigures(reader: MirrorReader): MirrorFigures {
  const stats = reader.stats();
  return { activeUsers: stats.activeUsers, deletedUsers: stats.deletedUsers, ...freshnessOf(stats) };
}

export function mirrorFreshness(reader: MirrorReader): MirrorFreshness {
  return freshnessOf(reader.runHistory());
}

function freshnessOf(stats: RunHistory): MirrorFreshness {
  const finished = stats.lastSucceededRun?.finishedAt ?? null;
  // The older of what the data was copied from and what the latest run found at the leader: a run refused
  // for a stale or restored leader (src/sync/leader-check.ts) tells the follower its leader went back in time.
  const sourceAt = [stats.lastSucceededRun?.source?.at, stats.lastRun?.source?.at].filter((a): a is string => a != null).sort()[0];
  const epoch = (stats.lastRun?.source ?? stats.lastSucceededRun?.source)?.epoch;
  const sinceSuccess = (run: SyncRun | undefined) => run !== undefined && run.id > (stats.lastSucceededRun?.id ?? 0);
  const problem = stats.lastProblemRun;
  const last = stats.lastRun;
  return {
    lastSucceededAt: finished === null ? undefined : new Date(finished),
    ...(sourceAt === undefined ? {} : { sourceAt: new Date(sourceAt) }),
    ...(epoch == null ? {} : { sourceEpoch: epoch }),
    lastProblem:
      problem !== undefined && problem.status !== 'succeeded' && sinceSuccess(problem) ? trouble(problem, problem.status) : undefined,
    running: last?.status === 'running' ? trouble(last, 'running') : undefined,
  };
}

function trouble(run: SyncRun, status: RunTrouble['status']): RunTrouble {
  return {
    runId: run.id,
    status,
    at: run.finishedAt ?? run.startedAt,
    reason: run.error ?? run.sweepSkippedReason,
  };
}
