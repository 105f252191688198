/**
 * What one scan pass has seen, kept in memory: a fingerprint of the content
 * hash of every user active when the run began, and which user_ids were
 * listed so far. Pure: no I/O. It is what makes an unchanged user cheap to
 * re-sync (two string hashes and a table probe, no SQLite call), and what
 * the deletion candidates and the mass-delete breaker count from.
 *
 * Memory, while a run lasts: users are kept as 64-bit fingerprints of their
 * user_id in a FingerprintTable, 34 to 68 bytes per user (active at the
 * start, or listed), ~36 MB for a million, where strings in a Map and a Set
 * took ~250 MB. Still O(users): bounded by the directory's size, with a small
 * constant. Released when the run publishes or fails. The ledger keeps no
 * user_id, so the candidates are read back from the mirror (`isUnseenActive`).
 *
 * Fingerprint collisions (two user_ids, same 64 bits: about n²/2⁶⁵, 3·10⁻⁸
 * for a run over a million users) err on the safe side. The later of the two
 * users found in the table is taken for the earlier one:
 * - listed: it counts as a repeat (a duplicate), and a repeat is staged
 *   unless its content fingerprint also collides (2⁻⁶⁴ more).
 * - deletion candidates are only ever deleted once the service confirms
 *   them gone, so a collision can at worst leave a user unchecked for a run.
 * - two users active at the start collide: the slot is marked so that
 *   neither is ever judged unchanged; listing one marks both as seen.
 */
import { FingerprintTable, fingerprint64 } from './fingerprint-table.js';

export type Sighting =
  /** First listing of a user active at the start, with the same content: nothing to write. */
  | 'unchanged'
  /** New, changed, or coming back after a deletion: stage it. */
  | 'write'
  /** Listed before in this pass: drift. The latest listing wins (see `stale`). */
  | 'repeat-write'
  | 'repeat-unchanged';

/** Writes a 64-bit fingerprint of `s` to out[0] and out[1]. Injectable, to force collisions in tests. */
export type Fingerprint64 = (s: string, out: Uint32Array) => void;

const ACTIVE = 1;
const SEEN = 2;
/** Two users active at the start share the slot: its content fingerprint is one of theirs only. */
const SHARED = 4;

export class RunLedger {
  private readonly table: FingerprintTable;
  private readonly key = new Uint32Array(2);
  private readonly content = new Uint32Array(2);
  private activeSlots = 0;
  private unseenActive = 0;
  private seen = 0;

  /**
   * `active`: [user_id, content_hash] of every user active in the mirror at
   * the start, streamed. `expectedUsers` (the listing's total) sizes the
   * table once: growing it mid-run holds the old and the new arrays at once.
   */
  constructor(
    active: Iterable<readonly [string, string]>,
    private readonly fingerprint: Fingerprint64 = fingerprint64,
    expectedUsers = 0,
  ) {
    this.table = new FingerprintTable(expectedUsers);
    for (const [userId, hash] of active) this.addActive(userId, hash);
    this.unseenActive = this.activeSlots;
  }

  /**
   * Records one listing of `userId` with content `hash` and says what to do.
   * For a repeat, whatever an earlier listing staged is stale: drop it, then
   * write only if this listing differs from the mirror.
   */
  sight(userId: string, hash: string): Sighting {
    const slot = this.slotOf(userId);
    const flags = this.table.flagsAt(slot);
    this.fingerprint(hash, this.content);
    const same = (flags & (ACTIVE | SHARED)) === ACTIVE && this.table.valueEquals(slot, this.content[0] ?? 0, this.content[1] ?? 0);
    if ((flags & SEEN) !== 0) return same ? 'repeat-unchanged' : 'repeat-write';
    this.markSeen(slot, flags);
    return same ? 'unchanged' : 'write';
  }

  /** A listing that could not be parsed still shows the user exists: never sweep it. */
  sightUnparsed(userId: string): void {
    const slot = this.slotOf(userId);
    const flags = this.table.flagsAt(slot);
    if ((flags & SEEN) === 0) this.markSeen(slot, flags);
  }

  /** Active users not listed so far: what a sweep would delete now. */
  get unseenActiveCount(): number {
    return this.unseenActive;
  }

  /** Distinct user_ids listed so far. */
  get seenCount(): number {
    return this.seen;
  }

  /**
   * Whether a sweep deletes `userId`: active at the start and not listed.
   * The caller enumerates the candidates (the mirror's active users).
   */
  isUnseenActive(userId: string): boolean {
    this.fingerprint(userId, this.key);
    const slot = this.table.find(this.key[0] ?? 0, this.key[1] ?? 0);
    return slot >= 0 && (this.table.flagsAt(slot) & (ACTIVE | SEEN)) === ACTIVE;
  }

  private addActive(userId: string, hash: string): void {
    this.fingerprint(userId, this.key);
    const found = this.table.find(this.key[0] ?? 0, this.key[1] ?? 0);
    if (found >= 0) {
      this.table.setFlagsAt(found, ACTIVE | SHARED);
      return;
    }
    const slot = this.table.add(this.key[0] ?? 0, this.key[1] ?? 0);
    this.fingerprint(hash, this.content);
    this.table.setValue(slot, this.content[0] ?? 0, this.content[1] ?? 0);
    this.table.setFlagsAt(slot, ACTIVE);
    this.activeSlots++;
  }

  /** The slot of `userId`, added (no flags) if absent. */
  private slotOf(userId: string): number {
    this.fingerprint(userId, this.key);
    const hi = this.key[0] ?? 0;
    const lo = this.key[1] ?? 0;
    const slot = this.table.find(hi, lo);
    return slot >= 0 ? slot : this.table.add(hi, lo);
  }

  private markSeen(slot: number, flags: number): void {
    this.table.setFlagsAt(slot, flags | SEEN);
    this.seen++;
    if ((flags & ACTIVE) !== 0) this.unseenActive--;
  }
}
