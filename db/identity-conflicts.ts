/**
 * Identity conflicts within one scan: two listings of the same run that
 * disagree on who is who. The mirror keeps the later listing (the later read
 * of the service, a page or a minute after the other: the listing moved, or
 * the service changed the record between the two reads), exactly as it does
 * across runs, and the run stays as it would be. A conflict is never silent:
 * the run counts them (`sync_runs.identity_conflicts`), `status` shows the
 * count, and the sync logs the first few at warn with their ids.
 *
 * Why the later wins rather than the run going `partial`: `partial` holds
 * back deletions, which a conflict does not make unsafe (a deletion is
 * still confirmed upstream one user at a time), and a team that re-keys a
 * user would otherwise hold every run's deletions for as long as it takes.
 */

export type IdentityConflict =
  /** One user_id listed under two client_user_ids: the later holds the user. */
  | { kind: 'user_id'; userId: string; earlier: string; later: string }
  /** One (team_id, client_user_id) listed for two users: the later keeps the key, the earlier is stored deleted. */
  | { kind: 'client_user_id'; teamId: string; clientUserId: string; earlier: string; later: string };

/** Conflicts kept with ids per run, for the log; the rest are only counted. */
const KEPT = 20;

/** A run's conflicts: all counted, the first KEPT kept. */
export class IdentityConflicts {
  count = 0;
  readonly kept: IdentityConflict[] = [];

  add(conflict: IdentityConflict): void {
    this.count++;
    if (this.kept.length < KEPT) this.kept.push(conflict);
  }

  /** Adds another tally's conflicts (the writer's and the store's, for one run). */
  merge(other: { count: number; kept: readonly IdentityConflict[] }): void {
    for (const c of other.kept) this.add(c);
    this.count += other.count - other.kept.length;
  }

  clear(): void {
    this.count = 0;
    this.kept.length = 0;
  }

  /** A copy, for a result that outlives the next run. */
  snapshot(): { count: number; kept: IdentityConflict[] } {
    return { count: this.count, kept: [...this.kept] };
  }
}
