/**
 * What one scan pass has seen, kept in memory: which users were active when
 * the run began, with what content, and which of them the pass has listed.
 * Pure: no I/O. It is what makes an unchanged user cheap to re-sync (two
 * string hashes and a table probe, no SQLite call), and what the deletion
 * candidates and the mass-delete breaker count from.
 *
 * Two sets of 64-bit fingerprints, no strings:
 * - `active`: one fingerprint of (user_id, content hash) per user active at
 *   the start, with flags. A listing whose pair is found is unchanged: it
 *   marks the entry seen and nothing is written.
 * - `listed`: one fingerprint of the user_id per user listed with other
 *   content than at the start (new, changed, reappearing, unparsable):
 *   a re-sync lists few.
 * So a user costs 12 bytes (a 64-bit key and a flag byte per slot, at most
 * three quarters full) in one of the two sets: ~36 MB for 3 million, where
 * a fingerprint of the user_id with one of the content beside it took 23
 * bytes, and strings in a Map and a Set ~250. Still O(users), with a small
 * constant; released when the run publishes or fails. A first sync keeps
 * none (FIRST_SYNC_LEDGER).
 *
 * A changed user's start entry is not found by its new listing, so the
 * writer reports the content the mirror held for each user it writes
 * (`settle`): that marks the start entry seen, and finds a user listed
 * unchanged earlier in the pass (a repeat). The candidates are read back from
 * the mirror with their stored content (`isUnseenActive`).
 *
 * Fingerprint collisions: the fingerprints are seeded per run, so that any
 * collision lasts one run. All err on the safe side but one:
 * - a listing whose (user_id, content) pair collides with another user's
 *   start entry (about n/2⁶⁴ per listing, 2·10⁻¹³ for a directory of 3
 *   million) is taken for unchanged: that user is not written in this run,
 *   and the other is not checked for deletion. The next run, seeded anew,
 *   writes it.
 * - two start entries that collide share a slot marked SHARED: neither is
 *   ever judged unchanged, and listing one marks both seen (the other is not
 *   checked for deletion in this run).
 * - two user_ids that collide in `listed`: the later reads as a repeat of
 *   the earlier (drift, which refuses the sweep) and is written.
 */

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

/** What a run writer asks of its ledger. */
export interface Ledger {
  sight(userId: string, hash: string): Sighting;
  settle(userId: string, priorHash: string | undefined): boolean;
  sightUnparsed(userId: string, stored: () => string | undefined): void;
  readonly unseenActiveCount: number;
  isUnseenActive(userId: string, hash: string): boolean;
}

/**
 * A first sync's ledger, which keeps nothing: into an empty mirror every
 * listing is written, there is no deletion candidate (nor anything to look
 * up in the mirror), and a repeat listing is found by the store when it
 * builds the user_id key at the publish (db/first-sync-load.ts). So a first
 * sync's memory does not grow with the directory (a RunLedger would hold
 * 12 bytes per user).
 */
export const FIRST_SYNC_LEDGER: Ledger = {
  sight: () => 'write',
  settle: () => false,
  sightUnparsed: () => undefined,
  unseenActiveCount: 0,
  isUnseenActive: () => false,
};

/** A start entry, always set on `active` slots (so a zero flag byte is only ever an empty slot's). */
const ACTIVE = 1;
const SEEN = 2;
/** Two start entries share the slot: a listing found there may be either user, so it is never unchanged. */
const SHARED = 4;
/** Seen, and the user counted once for good: a `settle` leaves it alone. */
const SETTLED = 8;

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
   * Records one listing of `userId` with content `hash` and says what to do.
   * For a repeat, whatever an earlier listing staged is stale: drop it, then
   * write only if this listing differs from the mirror. A 'write' is to be
   * settled (`settle`) once the writer knows what the mirror held.
   */
  sight(userId: string, hash: string): Sighting {
    this.pairOf(userId, hash);
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

  /** `key` := fingerprint of the user_id, `pair` := fingerprint of (user_id, content). */
  private pairOf(userId: string, hash: string): void {
    this.fingerprint(userId, this.key);
    this.fingerprint(hash, this.content);
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

/**
 * A set of 64-bit keys, each with a few flag bits, on typed arrays: open
 * addressing, linear probing, at most three quarters full. Pure.
 *
 * Why: a Set of a million user_id strings costs about 100 MB of heap; this
 * costs 9 bytes per slot, 12 per key, outside the JS heap and invisible to
 * the GC. The capacity is any size, not a power of two (a key's home slot
 * is its hash scaled to the capacity), so a table sized for the listing's
 * total holds it at three quarters full, and never doubles for the last few
 * users. Callers store fingerprints, not the strings, so they must make a
 * key collision harmless (see RunLedger).
 *
 * No deletion: keys live until the table is dropped.
 */
/** The flag byte of an occupied slot always has this bit, so a zero byte means "empty". */
const OCCUPIED = 0x80;
/** Flag bits callers may use. */
export const FLAG_BITS = 0x7f;

const MIN_CAPACITY = 1024;
/**
 * Fullest a table gets. Linear probing at 3/4 costs ~2.5 probes to find a
 * key and ~8.5 to learn one is absent, each on the slot after the last (one
 * cache line holds several); past it the misses grow as 1/(1 - load)².
 */
const MAX_LOAD = 0.75;
/** Growth when a listing outgrows its total (drift): half again, so old and new arrays together stay small. */
const GROWTH = 1.5;

export class FingerprintTable {
  /** Key halves of slot i at 2i (hi) and 2i+1 (lo). */
  private keys: Uint32Array;
  private flags: Uint8Array;
  private count = 0;
  private limit: number;

  constructor(expectedKeys = 0) {
    const capacity = Math.max(MIN_CAPACITY, Math.ceil(expectedKeys / MAX_LOAD) + 1);
    this.keys = new Uint32Array(capacity * 2);
    this.flags = new Uint8Array(capacity);
    this.limit = Math.floor(capacity * MAX_LOAD);
  }

  get size(): number {
    return this.count;
  }

  get capacity(): number {
    return this.flags.length;
  }

  /** The slot holding the key, or -1. */
  find(hi: number, lo: number): number {
    const slot = this.probe(hi >>> 0, lo >>> 0);
    return this.flags[slot] === 0 ? -1 : slot;
  }

  /**
   * Adds a key that `find` did not find, with value 0 and no flags, and
   * returns its slot. Growing moves every slot: never keep one across an add.
   */
  add(hi: number, lo: number): number {
    if (this.count + 1 > this.limit) this.grow();
    const slot = this.probe(hi >>> 0, lo >>> 0);
    if (this.flags[slot] !== 0) throw new Error('FingerprintTable.add: key already present');
    this.keys[slot * 2] = hi;
    this.keys[slot * 2 + 1] = lo;
    this.flags[slot] = OCCUPIED;
    this.count++;
    return slot;
  }

  flagsAt(slot: number): number {
    return (this.flags[slot] ?? 0) & FLAG_BITS;
  }

  setFlagsAt(slot: number, bits: number): void {
    this.flags[slot] = OCCUPIED | (bits & FLAG_BITS);
  }

  /** The slot holding the key, else the empty slot where it would go. */
  private probe(hi: number, lo: number): number {
    const { keys, flags } = this;
    const capacity = flags.length;
    let slot = homeSlot(hi, lo, capacity);
    for (;;) {
      if (flags[slot] === 0) return slot;
      if (keys[slot * 2] === hi && keys[slot * 2 + 1] === lo) return slot;
      slot = slot + 1 === capacity ? 0 : slot + 1;
    }
  }

  private grow(): void {
    const { keys, flags } = this;
    const capacity = Math.ceil(flags.length * GROWTH);
    this.keys = new Uint32Array(capacity * 2);
    this.flags = new Uint8Array(capacity);
    this.limit = Math.floor(capacity * MAX_LOAD);
    for (let i = 0; i < flags.length; i++) {
      if (flags[i] === 0) continue;
      const slot = this.probe(keys[i * 2] ?? 0, keys[i * 2 + 1] ?? 0);
      this.keys[slot * 2] = keys[i * 2] ?? 0;
      this.keys[slot * 2 + 1] = keys[i * 2 + 1] ?? 0;
      this.flags[slot] = flags[i] ?? 0;
    }
  }
}

/**
 * Where a key's probe starts in a table of `capacity` slots. The halves are
 * folded and mixed (a multiply by 2³²/φ), so that keys that are not hashes
 * (small integers, in tests) spread too, then scaled, not masked, to any
 * capacity: (h × capacity) / 2³² is below capacity for any 32-bit h, exactly
 * or after the product's rounding.
 */
export function homeSlot(hi: number, lo: number, capacity: number): number {
  return Math.floor(((Math.imul(hi ^ lo, 0x9e3779b1) >>> 0) * capacity) / 4294967296);
}

/**
 * A 64-bit fingerprint of a string, over its UTF-16 code units two at a
 * time, as two 32-bit halves written to `out`. The halves come from two
 * different mixers (MurmurHash3's and xxHash32's rounds and finalizers), not
 * one mixer with two seeds, so that a collision of one half says nothing
 * about the other. `seed` picks one of 2⁶⁴ such functions. Not
 * cryptographic: user_ids are not chosen to collide. About 0.2 µs for a
 * 36-character uuid (measured on a busy 2-core machine, node 20), less than
 * a Map lookup of the same string among a million.
 */
export function fingerprint64(s: string, out: Uint32Array, seedHi = 0, seedLo = 0): void {
  const n = s.length;
  let a = 0x243f6a88 ^ n ^ seedHi;
  let b = (0x85a308d3 + n) ^ seedLo;
  let i = 0;
  for (; i + 1 < n; i += 2) {
    const k = s.charCodeAt(i) | (s.charCodeAt(i + 1) << 16);
    a = murmurStep(a, k);
    b = xxStep(b, k);
  }
  if (i < n) {
    const k = s.charCodeAt(i);
    a ^= Math.imul(Math.imul(k, 0xcc9e2d51), 0x1b873593);
    b = Math.imul((b + Math.imul(k, 0x165667b1)) | 0, 0x27d4eb2f);
  }
  out[0] = murmurFinal(a);
  out[1] = xxFinal(b);
}

/** fingerprint64 under a seed drawn for this ledger: a collision in one run says nothing about the next. */
export function seededFingerprint64(): Fingerprint64 {
  const seed = new Uint32Array(2);
  crypto.getRandomValues(seed);
  const hi = seed[0] ?? 0;
  const lo = seed[1] ?? 0;
  return (s, out) => fingerprint64(s, out, hi, lo);
}

/**
 * One 64-bit fingerprint of two: `x`'s halves folded with both of `y`'s,
 * each half through its own mixer's rounds (as in fingerprint64), so that
 * swapping, or changing either, changes both halves.
 */
export function combine64(x: Uint32Array, y: Uint32Array, out: Uint32Array): void {
  const k0 = y[0] ?? 0;
  const k1 = y[1] ?? 0;
  out[0] = murmurFinal(murmurStep(murmurStep(x[0] ?? 0, k0), k1) ^ 8);
  out[1] = xxFinal(xxStep(xxStep(x[1] ?? 0, k0), k1) + 8);
}

/** One 32-bit word into MurmurHash3's state. */
function murmurStep(a: number, k: number): number {
  let m = Math.imul(k, 0xcc9e2d51);
  m = Math.imul((m << 15) | (m >>> 17), 0x1b873593);
  a ^= m;
  return (Math.imul((a << 13) | (a >>> 19), 5) + 0xe6546b64) | 0;
}

/** One 32-bit word into xxHash32's state. */
function xxStep(b: number, k: number): number {
  b = (b + Math.imul(k, 0x85ebca77)) | 0;
  return Math.imul((b << 13) | (b >>> 19), 0x9e3779b1);
}

function murmurFinal(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}

function xxFinal(h: number): number {
  h = Math.imul(h ^ (h >>> 15), 0x85ebca77);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae3d);
  return h ^ (h >>> 16);
}
