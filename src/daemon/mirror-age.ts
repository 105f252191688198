/**
 * What the daemon needs to know about the mirror's contents: its size and
 * when it was last completely refreshed, read on every scrape and at
 * start-up. "Completely" is a succeeded run: a partial one publishes changes
 * but no deletions (see src/sync/engine.ts).
 */
import type { MirrorReader } from '../../db/mirror-reader.js';
import type { MirrorFigures } from './metrics.js';

export function mirrorFigures(reader: MirrorReader): MirrorFigures {
  const stats = reader.stats();
  const finished = stats.lastSucceededRun?.finishedAt ?? null;
  return {
    activeUsers: stats.activeUsers,
    deletedUsers: stats.deletedUsers,
    lastSucceededAt: finished === null ? undefined : new Date(finished),
  };
}
