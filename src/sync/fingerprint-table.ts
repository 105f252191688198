/**
 * FingerprintTable: the typed-array set the run ledger (./run-ledger.ts)
 * keeps its users in, with where a key's probe starts (homeSlot).
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
