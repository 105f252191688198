/**
 * What one scan pass has seen, kept in memory: a fingerprint of the content
 * hash of every user active when the run began, and which user_ids were
 * listed so far. Pure: no I/O. It is what makes an unchanged user cheap to
 * re-sync (two string hashes and a table probe, no SQLite call), and what
 * the deletion candidates and the mass-delete breaker count from.
 *
 * Memory, while a run lasts: users are kept as 64-bit fingerprints of their
 * user_id in a FingerprintTable, at most 23 bytes per user (active at the
 * start, or listed), ~23 MB for a million, where strings in a Map and a Set
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

/**
 * A hash table of 64-bit keys, each with a 64-bit value and a few flag bits,
 * on typed arrays: open addressing, linear probing, at most three quarters
 * full. Pure.
 *
 * Why: a Map<string, string> of a million user_ids costs about 200 MB of
 * heap; this costs 17 bytes per slot (9 while no value was ever set: a first
 * sync's ledger), so 23 bytes per key at most (12 without values), outside
 * the JS heap and invisible to the GC: ~68 MB for the 3 million users a
 * re-sync holds, 36 MB for a first sync's. The capacity is any size, not a
 * power of two (a key's home slot is its hash scaled to the capacity), so a
 * table sized for the listing's total holds it at three quarters full, and
 * never doubles for the last few users. It is still O(keys): what it bounds
 * is the constant. Callers store fingerprints, not the strings, so they must
 * make a key collision harmless (see RunLedger).
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
  /** Key halves of slot i at 2i (hi) and 2i+1 (lo); values likewise. */
  private keys: Uint32Array;
  /** Allocated by the first setValue: a table that never holds values (a first sync's ledger) saves half. */
  private values: Uint32Array | undefined;
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

  valueEquals(slot: number, hi: number, lo: number): boolean {
    const values = this.values;
    if (values === undefined) return hi >>> 0 === 0 && lo >>> 0 === 0;
    return values[slot * 2] === hi >>> 0 && values[slot * 2 + 1] === lo >>> 0;
  }

  setValue(slot: number, hi: number, lo: number): void {
    this.values ??= new Uint32Array(this.flags.length * 2);
    this.values[slot * 2] = hi;
    this.values[slot * 2 + 1] = lo;
  }

  /** Clears `bits` in every slot, in one pass over the flags. */
  clearFlags(bits: number): void {
    const keep = ~(bits & FLAG_BITS) & 0xff;
    const flags = this.flags;
    for (let i = 0; i < flags.length; i++) flags[i] = (flags[i] ?? 0) & keep;
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
    const { keys, values, flags } = this;
    const capacity = Math.ceil(flags.length * GROWTH);
    this.keys = new Uint32Array(capacity * 2);
    this.values = values === undefined ? undefined : new Uint32Array(capacity * 2);
    this.flags = new Uint8Array(capacity);
    this.limit = Math.floor(capacity * MAX_LOAD);
    for (let i = 0; i < flags.length; i++) {
      if (flags[i] === 0) continue;
      const slot = this.probe(keys[i * 2] ?? 0, keys[i * 2 + 1] ?? 0);
      this.keys[slot * 2] = keys[i * 2] ?? 0;
      this.keys[slot * 2 + 1] = keys[i * 2 + 1] ?? 0;
      if (values !== undefined && this.values !== undefined) {
        this.values[slot * 2] = values[i * 2] ?? 0;
        this.values[slot * 2 + 1] = values[i * 2 + 1] ?? 0;
      }
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
 * about the other. Not cryptographic: user_ids are not chosen to collide.
 * About 0.2 µs for a 36-character uuid (measured on a busy 2-core machine, node
 * 20), less than a Map lookup of the same string among a million.
 */
export function fingerprint64(s: string, out: Uint32Array): void {
  const n = s.length;
  let a = 0x243f6a88 ^ n;
  let b = 0x85a308d3 + n;
  let i = 0;
  for (; i + 1 < n; i += 2) {
    const k = s.charCodeAt(i) | (s.charCodeAt(i + 1) << 16);
    let m = Math.imul(k, 0xcc9e2d51);
    m = Math.imul((m << 15) | (m >>> 17), 0x1b873593);
    a ^= m;
    a = (Math.imul((a << 13) | (a >>> 19), 5) + 0xe6546b64) | 0;
    b = (b + Math.imul(k, 0x85ebca77)) | 0;
    b = Math.imul((b << 13) | (b >>> 19), 0x9e3779b1);
  }
  if (i < n) {
    const k = s.charCodeAt(i);
    a ^= Math.imul(Math.imul(k, 0xcc9e2d51), 0x1b873593);
    b = Math.imul((b + Math.imul(k, 0x165667b1)) | 0, 0x27d4eb2f);
  }
  out[0] = murmurFinal(a);
  out[1] = xxFinal(b);
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
