/**
 * FingerprintTable: the typed-array set the run ledger (./run-ledger.ts)
 * keeps its users in, with where a key's probe starts (homeSlot).
 */
/**
 * A slot is two 32-bit words: the key's high half and its low half. The
 * high word's top bit says the slot is taken (so an all-zero word is an
 * empty slot), the next four hold the flags, and the key keeps the other 27
 * bits of its high half: 59 bits of each key are stored and compared.
 */
const OCCUPIED = 0x80000000;
const FLAG_SHIFT = 27;
/** Flag bits callers may use. */
const FLAG_BITS = 0x0f;
/** The bits of a key's high half the table keeps. */
const KEY_HI = 0x07ffffff;

const MIN_CAPACITY = 1024;
/**
 * Fullest a table gets. Linear probing at 85% costs ~3.8 probes to find a
 * key and ~23 to learn one is absent, each on the slot after the last (a
 * 64-byte cache line holds eight); past it the misses grow as 1/(1 - load)².
 * A re-sync's probes are mostly finds of unchanged users; at 75% full the
 * ledger of 3 million users took 4 MB more.
 */
const MAX_LOAD = 0.85;
/** Growth when a listing outgrows its total (drift): half again, so old and new arrays together stay small. */
const GROWTH = 1.5;

/**
 * A set of 59-bit keys, each with four flag bits, on one typed array: open
 * addressing, linear probing, at most 85% full. Pure.
 *
 * Why: a Set of a million user_id strings costs about 100 MB of heap; this
 * costs 8 bytes per slot, 9.4 per key, outside the JS heap and invisible to
 * the GC. The capacity is any size, not a power of two (a key's home slot
 * is its hash scaled to the capacity), so a table sized for the listing's
 * total holds it 85% full, and never grows for the last few users.
 * Callers give 64-bit fingerprints and the table keeps 59 bits of them, so
 * two keys that differ only in the 5 bits it drops are one key: callers
 * store fingerprints, not the strings, so they must make a key collision
 * harmless anyway (see RunLedger).
 *
 * No deletion: keys live until the table is dropped.
 */
export class FingerprintTable {
  /** Slot i at 2i (taken bit, flags, the key's high half) and 2i+1 (its low half). */
  private keys: Uint32Array;
  private count = 0;
  private limit: number;

  constructor(expectedKeys = 0) {
    const capacity = Math.max(MIN_CAPACITY, Math.ceil(expectedKeys / MAX_LOAD) + 1);
    this.keys = new Uint32Array(capacity * 2);
    this.limit = Math.floor(capacity * MAX_LOAD);
  }

  get size(): number {
    return this.count;
  }

  get capacity(): number {
    return this.keys.length / 2;
  }

  /** The slot holding the key, or -1. */
  find(hi: number, lo: number): number {
    const slot = this.probe(hi & KEY_HI, lo >>> 0);
    return this.keys[slot * 2] === 0 ? -1 : slot;
  }

  /**
   * Adds a key that `find` did not find, with no flags, and returns its
   * slot. Growing moves every slot: never keep one across an add.
   */
  add(hi: number, lo: number): number {
    if (this.count + 1 > this.limit) this.grow();
    const kept = hi & KEY_HI;
    const slot = this.probe(kept, lo >>> 0);
    if (this.keys[slot * 2] !== 0) throw new Error('FingerprintTable.add: key already present');
    this.keys[slot * 2] = OCCUPIED | kept;
    this.keys[slot * 2 + 1] = lo;
    this.count++;
    return slot;
  }

  /** Calls `each` with every key's kept halves (the high half cut to 27 bits: `find` and `add` take it so). */
  forEachKey(each: (hi: number, lo: number) => void): void {
    const { keys } = this;
    for (let i = 0; i < keys.length; i += 2) {
      const word = keys[i] ?? 0;
      if (word !== 0) each(word & KEY_HI, keys[i + 1] ?? 0);
    }
  }

  flagsAt(slot: number): number {
    return ((this.keys[slot * 2] ?? 0) >>> FLAG_SHIFT) & FLAG_BITS;
  }

  setFlagsAt(slot: number, bits: number): void {
    const word = this.keys[slot * 2] ?? 0;
    this.keys[slot * 2] = OCCUPIED | ((bits & FLAG_BITS) << FLAG_SHIFT) | (word & KEY_HI);
  }

  /** The slot holding the key (`hi` already cut to KEY_HI, `lo` unsigned), else the empty slot where it would go. */
  private probe(hi: number, lo: number): number {
    const { keys } = this;
    const capacity = keys.length / 2;
    let slot = homeSlot(hi, lo, capacity);
    for (;;) {
      const word = keys[slot * 2] ?? 0;
      if (word === 0) return slot;
      if ((word & KEY_HI) === hi && keys[slot * 2 + 1] === lo) return slot;
      slot = slot + 1 === capacity ? 0 : slot + 1;
    }
  }

  private grow(): void {
    const old = this.keys;
    const capacity = Math.ceil((old.length / 2) * GROWTH);
    this.keys = new Uint32Array(capacity * 2);
    this.limit = Math.floor(capacity * MAX_LOAD);
    for (let i = 0; i < old.length; i += 2) {
      const word = old[i] ?? 0;
      if (word === 0) continue;
      const lo = old[i + 1] ?? 0;
      const slot = this.probe(word & KEY_HI, lo);
      this.keys[slot * 2] = word;
      this.keys[slot * 2 + 1] = lo;
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
