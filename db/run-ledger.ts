/**
 * What one scan pass has seen, kept in memory: the content hash of every
 * user active when the run began, and every user_id listed so far. Pure: no
 * I/O. It is what makes an unchanged user cheap to re-sync (a hash compare
 * and two hash-table operations, no SQLite call), and what the sweep and the
 * mass-delete breaker count from.
 *
 * Memory is about 200 bytes per active user while a run lasts; it is
 * released when the run publishes or fails.
 */
export type Sighting =
  /** First listing of a user active at the start, with the same content: nothing to write. */
  | 'unchanged'
  /** New, changed, or coming back after a deletion: stage it. */
  | 'write'
  /** Listed before in this pass: drift. The latest listing wins (see `stale`). */
  | 'repeat-write'
  | 'repeat-unchanged';

export class RunLedger {
  private readonly seen = new Set<string>();
  private unseenActive: number;

  /** `active`: user_id → content_hash of every user active in the mirror at the start. */
  constructor(private readonly active: ReadonlyMap<string, string>) {
    this.unseenActive = active.size;
  }

  /**
   * Records one listing of `userId` with content `hash` and says what to do.
   * For a repeat, whatever an earlier listing staged is stale: drop it, then
   * write only if this listing differs from the mirror.
   */
  sight(userId: string, hash: string): Sighting {
    const known = this.active.get(userId);
    const differs = known !== hash;
    if (this.seen.has(userId)) return differs ? 'repeat-write' : 'repeat-unchanged';
    this.seen.add(userId);
    if (known !== undefined) this.unseenActive--;
    return differs ? 'write' : 'unchanged';
  }

  /** A listing that could not be parsed still shows the user exists: never sweep it. */
  sightUnparsed(userId: string): void {
    if (this.seen.has(userId)) return;
    this.seen.add(userId);
    if (this.active.has(userId)) this.unseenActive--;
  }

  /** Active users not listed so far: what a sweep would delete now. */
  get unseenActiveCount(): number {
    return this.unseenActive;
  }

  /** Distinct user_ids listed so far. */
  get seenCount(): number {
    return this.seen.size;
  }

  /** The users a sweep deletes. */
  *unseenActiveIds(): Generator<string> {
    for (const userId of this.active.keys()) if (!this.seen.has(userId)) yield userId;
  }

  /** A fresh pass over the same starting mirror (after discarding a drifted one). */
  restart(): RunLedger {
    return new RunLedger(this.active);
  }
}
