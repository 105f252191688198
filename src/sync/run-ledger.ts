/**
 * What one scan pass has seen, kept in memory: which users were active when
 * the run began, with what content, and which of them the pass has listed.
 * Pure: no I/O. It is what makes an unchanged user cheap to re-sync (a
 * fingerprint of its user_id, one of its content's digest, and a table
 * probe; no SQLite call), and what the deletion candidates and the
 * mass-delete breaker count from.
 *
 * Two sets of fingerprints (64-bit, of which the sets keep 59 bits), no strings:
 * - `active`: one fingerprint of (user_id, content hash) per user active at
 *   the start, with flags. A listing whose pair is found is unchanged: it
 *   marks the entry seen and nothing is written.
 * - `listed`: one fingerprint of the user_id per user listed with other
 *   content than at the start (new, changed, reappearing, unparsable):
 *   a re-sync lists few.
 * So a user costs 9.4 bytes (8 bytes per slot, a 59-bit key and its
 * flags, at most 85% full) in one of the two sets: ~28 MB for 3 million,
 * where a 64-bit key and a flag byte at most three quarters full took 12
 * bytes, a fingerprint of the user_id with one of the content beside it 23,
 * and strings in a Map and a Set ~250. Still O(users), with a small
 * constant; released when the run publishes or fails. A first sync keeps
 * only 32 bits of each listed user_id, 5 bytes a user (FirstSyncLedger).
 *
 * A changed user's start entry is not found by its new listing, so the
 * writer reports the content the mirror held for each user it writes
 * (`settle`): that marks the start entry seen, and finds a user listed
 * unchanged earlier in the pass (a repeat). The candidates are read back from
 * the mirror with their stored content (`isUnseenActive`).
 *
 * The content is fingerprinted by its SHA-256 digest alone (db/user-row.ts's
 * ContentDigest: 43 base64url characters, read a byte each, all 256 bits),
 * not by its tagged text: a listing's digest is what node's hash returns,
 * no tag prepended (a copy per record), and a stored hash's is found in
 * place (digestStart). A stored hash of another ROW_FORMAT has no digest
 * and is fingerprinted whole, with a constant flipped in (OTHER_FORMAT),
 * so that no text of its equals a digest but by a collision, as below:
 * the run rewrites it.
 *
 * Fingerprint collisions: the fingerprints are seeded per run (the user_id's,
 * the digest's, and so the pair's), so that any collision lasts one run. Two
 * different digests are two different 256-bit inputs to the seeded mixer,
 * so two records sharing a prefix of their SHA-256 do not collide for it.
 * All err on the safe side but one:
 * - a listing whose (user_id, content) pair collides with another user's
 *   start entry (about n/2⁵⁹ per listing, 5·10⁻¹² for a directory of 3
 *   million) is taken for unchanged: that user is not written in this run,
 *   and the other is not checked for deletion. The next run, seeded anew,
 *   writes it.
 * - two start entries that collide share a slot marked SHARED: neither is
 *   ever judged unchanged, and listing one marks both seen (the other is not
 *   checked for deletion in this run).
 * - two user_ids that collide in `listed`: the later reads as a repeat of
 *   the earlier (drift, which refuses the sweep) and is written.
 */

import { FingerprintTable } from './fingerprint-table.js';
import { ListedSet } from './listed-set.js';
import { combine64, seededFingerprint64, type Fingerprint64 } from './fingerprint.js';
import { digestStart, type ContentDigest } from '../../db/user-row.js';

export type Sighting =
  /** First listing of a user active at the start, with the same content: nothing to write. */
  | 'unchanged'
  /** New, changed, or coming back after a deletion: stage it. */
  | 'write'
  /** Listed before in this pass: drift. The latest listing wins (see `stale`). */
  | 'repeat-write'
  | 'repeat-unchanged';

/** What a run writer asks of its ledger. */
export interface Ledger {
  sight(userId: string, digest: ContentDigest): Sighting;
  settle(userId: string, priorHash: string | undefined): boolean;
  sightUnparsed(userId: string, stored: () => string | undefined): void;
  readonly unseenActiveCount: number;
  /** Distinct user_ids listed so far; a first sync's may fall short (FirstSyncLedger): a page's fresh users. */
  readonly seenCount: number;
  /** Distinct user_ids listed so far, exactly: what the listing is judged by. `written`: the user_ids of the rows the run wrote. */
  distinctCount(written: () => Iterable<string>): number;
  isUnseenActive(userId: string, hash: string): boolean;
}

/**
 * A first sync's ledger: into an empty mirror every listing is written,
 * there is no deletion candidate (nor anything to look up in the mirror),
 * and a repeat listing is found by the store when it builds the user_id key
 * at the publish (db/first-sync-load.ts). It keeps only what counts the
 * distinct users the listing showed (a listing that repeats itself is never
 * complete: ./listing-check.ts): a compact set of the user_ids written (a
 * ListedSet, 5 bytes a user, sized once from the listing's total; a
 * FingerprintTable took 9.4, 28 MB of a 3-million-user first sync's peak),
 * and a FingerprintTable of the user_ids only rejected records named (none
 * on a healthy listing).
 *
 * The set can take two user_ids for one (./listed-set.ts: ~10⁻³ for 3
 * million users), which under-counts. So while no listing was found in it,
 * its size is the count, exactly; once one was (a repeat, or a false
 * match), `distinctCount` counts again from the rows the run wrote, each
 * user_id fingerprinted in full into a FingerprintTable, with the rejected
 * ones beside: the count a FingerprintTable of every user gave, at the cost
 * of reading the run's rows (a full scan of users) and of that table's 9.4
 * bytes a user while it counts, only then: on a listing that repeated
 * itself, or once in ~700 first syncs of 3 million users. `seenCount` stays the set's, for a
 * page's fresh users (it may call a user fresh no more often than exactly).
 */
/** Sightings a FirstSyncLedger remembers in full: more than a page's records (MAX_PAGE_LIMIT, 500). */
const RECENT = 1024;

export class FirstSyncLedger implements Ledger {
  private readonly listed: ListedSet;
  /** User_ids named only by rejected records: not among the rows written. */
  private readonly unparsed = new FingerprintTable();
  /** Sightings the set found already listed (repeats, or false matches): the set's size is exact while none. */
  private found = 0;
  /**
   * The fingerprints of the latest sightings, in full: a record sighted and then rejected (its JSON or its
   * fields bad) is shown again by `sightUnparsed` after its page's writes, and is no repeat.
   */
  private readonly recent = new Uint32Array(RECENT * 2);
  private recentAt = 0;
  private readonly key = new Uint32Array(2);
  readonly unseenActiveCount = 0;

  constructor(
    expected = 0,
    private readonly fingerprint: Fingerprint64 = seededFingerprint64(),
  ) {
    this.listed = new ListedSet(expected);
  }

  sight(userId: string): Sighting {
    this.fingerprint(userId, this.key);
    const hi = this.key[0] ?? 0;
    const lo = this.key[1] ?? 0;
    if (!this.listed.add(hi, lo)) this.found++;
    this.recent[this.recentAt * 2] = hi;
    this.recent[this.recentAt * 2 + 1] = lo;
    this.recentAt = (this.recentAt + 1) % RECENT;
    return 'write';
  }

  settle(): boolean {
    return false;
  }

  sightUnparsed(userId: string): void {
    this.fingerprint(userId, this.key);
    const hi = this.key[0] ?? 0;
    const lo = this.key[1] ?? 0;
    if (this.unparsed.find(hi, lo) >= 0) return;
    this.unparsed.add(hi, lo);
    // Its own record's sighting, this page: counted then (or flagged, if the set took it for another user).
    if (!this.listed.add(hi, lo) && !this.sightedLately(hi >>> 0, lo >>> 0)) this.found++;
  }

  private sightedLately(hi: number, lo: number): boolean {
    const { recent } = this;
    for (let i = 0; i < recent.length; i += 2) if (recent[i] === hi && recent[i + 1] === lo) return true;
    return false;
  }

  isUnseenActive(): boolean {
    return false;
  }

  get seenCount(): number {
    return this.listed.size;
  }

  distinctCount(written: () => Iterable<string>): number {
    if (this.found === 0) return this.listed.size;
    const exact = new FingerprintTable(this.listed.size);
    const add = (hi: number, lo: number): void => {
      if (exact.find(hi, lo) < 0) exact.add(hi, lo);
    };
    for (const userId of written()) {
      this.fingerprint(userId, this.key);
      add(this.key[0] ?? 0, this.key[1] ?? 0);
    }
    this.unparsed.forEachKey(add);
    return exact.size;
  }
}

/** A start entry, always set on `active` slots (so a zero flag byte is only ever an empty slot's). */
const ACTIVE = 1;
const SEEN = 2;
/** Two start entries share the slot: a listing found there may be either user, so it is never unchanged. */
const SHARED = 4;
/** Seen, and the user counted once for good: a `settle` leaves it alone. */
const SETTLED = 8;

/**
 * Flipped into the content fingerprint of a stored hash of another
 * ROW_FORMAT: even a text that spells a digest's characters is then not
 * that digest's content.
 */
const OTHER_FORMAT = 0x5bd1e995;

/** How many users each set should expect, so that it is sized once (growing holds old and new arrays at once). */
export interface LedgerSizes {
  /** Users active in the mirror at the start (the listing's total will do). */
  active: number;
  /** Users the pass will list with new content: few on a re-sync. */
  listed: number;
}

export class RunLedger implements Ledger {
  private readonly active: FingerprintTable;
  private readonly listed: FingerprintTable;
  private readonly key = new Uint32Array(2);
  private readonly content = new Uint32Array(2);
  private readonly pair = new Uint32Array(2);
  private unseenActive = 0;
  private seen = 0;

  /** `active`: [user_id, content_hash] of every user active in the mirror at the start, streamed. */
  constructor(
    active: Iterable<readonly [string, string]>,
    private readonly fingerprint: Fingerprint64 = seededFingerprint64(),
    sizes: LedgerSizes = { active: 0, listed: 0 },
  ) {
    this.active = new FingerprintTable(sizes.active);
    this.listed = new FingerprintTable(sizes.listed);
    for (const [userId, hash] of active) this.addActive(userId, hash);
    this.unseenActive = this.active.size;
  }

  /**
   * Records one listing of `userId` with content `digest` and says what to do.
   * For a repeat, whatever an earlier listing staged is stale: drop it, then
   * write only if this listing differs from the mirror. A 'write' is to be
   * settled (`settle`) once the writer knows what the mirror held.
   */
  sight(userId: string, digest: ContentDigest): Sighting {
    this.fingerprint(digest, this.content);
    this.pairWithContent(userId);
    const listed = this.listed.find(this.key[0] ?? 0, this.key[1] ?? 0) >= 0;
    const slot = this.active.find(this.pair[0] ?? 0, this.pair[1] ?? 0);
    if (slot < 0) {
      if (listed) return 'repeat-write';
      this.addListed();
      return 'write';
    }
    const flags = this.active.flagsAt(slot);
    const repeat = listed || (flags & SEEN) !== 0;
    if ((flags & SHARED) !== 0) {
      // Either twin: write it, and let `settle` (the mirror's content for this user) mark the entry.
      if (repeat) return 'repeat-write';
      this.addListed();
      return 'write';
    }
    if ((flags & SEEN) === 0) this.markSeen(slot, flags, !listed);
    return repeat ? 'repeat-unchanged' : 'unchanged';
  }

  /**
   * After a 'write' or an unparsable listing, what the mirror held for the
   * user when it was written: `priorHash` its content then (undefined: no
   * row). Marks the user's start entry seen, and returns whether the pass had
   * already listed it unchanged (a repeat the sighting could not tell).
   */
  settle(userId: string, priorHash: string | undefined): boolean {
    if (priorHash === undefined) return false;
    this.pairOf(userId, priorHash);
    const slot = this.active.find(this.pair[0] ?? 0, this.pair[1] ?? 0);
    if (slot < 0) return false;
    const flags = this.active.flagsAt(slot);
    if ((flags & SETTLED) !== 0) return false;
    this.active.setFlagsAt(slot, flags | SEEN | SETTLED);
    if ((flags & SEEN) === 0) {
      this.unseenActive--;
      return false;
    }
    // Counted once when listed unchanged, once when listed again: one user.
    this.seen--;
    return true;
  }

  /**
   * A listing that could not be parsed still shows the user exists: never
   * sweep it. Settled with the mirror's content for the user, `stored()`.
   */
  sightUnparsed(userId: string, stored: () => string | undefined): void {
    this.fingerprint(userId, this.key);
    if (this.listed.find(this.key[0] ?? 0, this.key[1] ?? 0) < 0) this.addListed();
    this.settle(userId, stored());
  }

  /** Active users not listed so far: what a sweep would delete now. */
  get unseenActiveCount(): number {
    return this.unseenActive;
  }

  /** Distinct user_ids listed so far. */
  get seenCount(): number {
    return this.seen;
  }

  distinctCount(): number {
    return this.seen;
  }

  /**
   * Whether a sweep deletes `userId`, whose row holds content `hash`: active
   * at the start and not listed. The caller enumerates the candidates (the
   * mirror's users); a user written in this run holds new content, and is
   * in `listed`.
   */
  isUnseenActive(userId: string, hash: string): boolean {
    this.pairOf(userId, hash);
    const slot = this.active.find(this.pair[0] ?? 0, this.pair[1] ?? 0);
    if (slot < 0 || (this.active.flagsAt(slot) & SEEN) !== 0) return false;
    return this.listed.find(this.key[0] ?? 0, this.key[1] ?? 0) < 0;
  }

  private addActive(userId: string, hash: string): void {
    this.pairOf(userId, hash);
    const found = this.active.find(this.pair[0] ?? 0, this.pair[1] ?? 0);
    if (found >= 0) {
      this.active.setFlagsAt(found, ACTIVE | SHARED);
      return;
    }
    this.active.setFlagsAt(this.active.add(this.pair[0] ?? 0, this.pair[1] ?? 0), ACTIVE);
  }

  /** `key` := fingerprint of the user_id, `pair` := fingerprint of (user_id, stored content hash `hash`). */
  private pairOf(userId: string, hash: string): void {
    const digest = digestStart(hash);
    if (digest >= 0) this.fingerprint(hash, this.content, digest);
    else {
      this.fingerprint(hash, this.content);
      this.content[1] = (this.content[1] ?? 0) ^ OTHER_FORMAT;
    }
    this.pairWithContent(userId);
  }

  /** `key` := fingerprint of the user_id, `pair` := fingerprint of (user_id, `content`). */
  private pairWithContent(userId: string): void {
    this.fingerprint(userId, this.key);
    combine64(this.key, this.content, this.pair);
  }

  /** Adds `key` (the user_id just fingerprinted) to `listed`: a user counted once. */
  private addListed(): void {
    this.listed.add(this.key[0] ?? 0, this.key[1] ?? 0);
    this.seen++;
  }

  /** `counted`: this listing counts the user; if not (already in `listed`), no later `settle` may uncount it. */
  private markSeen(slot: number, flags: number, counted: boolean): void {
    this.active.setFlagsAt(slot, flags | SEEN | (counted ? 0 : SETTLED));
    if (counted) this.seen++;
    this.unseenActive--;
  }
}
