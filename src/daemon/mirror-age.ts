/**
 * What the daemon needs to know about the mirror's contents: its size, when
 * it was last completely refreshed, and what went wrong since. "Completely"
 * is a succeeded run: a partial one publishes changes but no deletions (see
 * src/sync/engine.ts). Freshness alone is read on every /readyz and at
 * start-up; the size (two counts over `users`, not free on a large mirror)
 * only where it is shown: scrapes and `status`.
 */
import type { MirrorReader, RunHistory, SyncRun } from '../../db/mirror-reader.js';
import type { MirrorFigures } from './metrics.js';
import type { RunTrouble } from './staleness.js';

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
  const sinceSuccess = (run: SyncRun | undefined) => run !== undefined && run.id > (stats.lastSucceededRun?.id ?? 0);
  const problem = stats.lastProblemRun;
  const last = stats.lastRun;
  return {
    lastSucceededAt: finished === null ? undefined : new Date(finished),
    lastProblem: problem !== undefined && problem.status !== 'succeeded' && sinceSuccess(problem) ? trouble(problem, problem.status) : undefined,
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
