/**
 * A follower's runs and the leader they read (migration 13, sync_runs.source_*):
 * recorded as soon as a run's first page came, in a commit of its own, so that
 * a run refused for its leader (src/sync/leader-check.ts) still says what it saw.
 */
import type { Db } from './open.js';

/** What a leader's replica said of itself (the headers of src/service/source-freshness.ts). */
export interface RecordedSource {
  runId: number;
  publishedAt: string;
  sourceAt: string;
  epoch: string;
  restoredAt?: string | undefined;
  /** The leader's change-feed cursor this state reaches. */
  cursor?: number | undefined;
}

export class RunSources {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      record: db.prepare<{
        run: number;
        runId: number;
        publishedAt: string;
        sourceAt: string;
        epoch: string;
        restoredAt: string | null;
        cursor: number | null;
      }>(
        `UPDATE sync_runs SET source_run_id = @runId, source_published_at = @publishedAt, source_at = @sourceAt,
           source_epoch = @epoch, source_restored_at = @restoredAt, source_cursor = @cursor WHERE id = @run`,
      ),
      last: db.prepare<
        [],
        { source_run_id: number; source_published_at: string; source_at: string; source_epoch: string; source_restored_at: string | null }
      >(
        `SELECT source_run_id, source_published_at, source_at, source_epoch, source_restored_at
         FROM sync_runs WHERE source_epoch IS NOT NULL ORDER BY id DESC LIMIT 1`,
      ),
      // The partial index users_active_client_user leads with team_id: each is one seek.
      lowestTeam: db.prepare<[], { t: string | null }>(`SELECT min(team_id) AS t FROM users WHERE deleted_at IS NULL`),
      highestTeam: db.prepare<[], { t: string | null }>(`SELECT max(team_id) AS t FROM users WHERE deleted_at IS NULL`),
      followFrom: db.prepare<[], { source_cursor: number; source_epoch: string }>(
        `SELECT source_cursor, source_epoch FROM sync_runs WHERE status = 'succeeded' AND source_cursor IS NOT NULL
         ORDER BY id DESC LIMIT 1`,
      ),
    };
  }

  record(runId: number, source: RecordedSource): void {
    this.s.record.run({ run: runId, ...source, restoredAt: source.restoredAt ?? null, cursor: source.cursor ?? null });
  }

  /**
   * Where an incremental run may read the leader's feed from: the cursor and epoch of the latest succeeded
   * run (a failed one applied nothing); undefined without one, or when that run's leader sent no cursor.
   */
  followFrom(): { cursor: number; epoch: string } | undefined {
    const r = this.s.followFrom.get();
    return r === undefined ? undefined : { cursor: r.source_cursor, epoch: r.source_epoch };
  }

  /** The teams of the mirror's active users: none, one, or two of them (the lowest and highest) when it holds more than one. */
  activeTeams(): string[] {
    const lo = this.s.lowestTeam.get()?.t ?? null;
    const hi = this.s.highestTeam.get()?.t ?? null;
    if (lo === null || hi === null) return [];
    return lo === hi ? [lo] : [lo, hi];
  }

  /** The leader the latest run recorded, refused or not; undefined for a mirror that reads the service itself. */
  last(): RecordedSource | undefined {
    const r = this.s.last.get();
    if (r === undefined) return undefined;
    return {
      runId: r.source_run_id,
      publishedAt: r.source_published_at,
      sourceAt: r.source_at,
      epoch: r.source_epoch,
      ...(r.source_restored_at === null ? {} : { restoredAt: r.source_restored_at }),
    };
  }
}
