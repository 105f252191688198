/**
 * ListedSet: the compact set a first sync keeps its listed user_ids in
 * (./run-ledger.ts, FirstSyncLedger), to count the distinct users its
 * listing showed (./listing-check.ts).
 */
import { FingerprintTable, homeSlot } from './fingerprint-table.js';

const MIN_CAPACITY = 1024;
/**
 * Fullest the array gets. At 80% a linear probe that finds nothing compares
 * ~12 slots, sixteen to a cache line; averaged over a first sync's fill
 * from empty to 80%, an insert compares ~2 taken slots (what the false
 * matches below are counted from).
 */
const MAX_LOAD = 0.8;

/**
 * A set of 64-bit fingerprints that keeps 32 bits of each: the high half
 * picks the home slot, the low half is stored (0 stored as 1, so that an
 * all-zero word is an empty slot). One Uint32Array, open addressing,
 * linear probing, at most 80% full: 5 bytes a key (3 million users: 15 MB,
 * where FingerprintTable's 59-bit keys take 9.4 bytes, 28 MB). Pure.
 *
 * Sized once, from the listing's total: the high halves are not kept, so
 * the array cannot be rehashed into a larger one. Keys past its 80% (a
 * listing that outgrew its total) go to a FingerprintTable beside it,
 * which grows.
 *
 * Two keys are taken for one when their stored halves are equal and one
 * lies in the other's probe run: about 2 comparisons per insert, each
 * matching by chance with 2⁻³², so ~1.4·10⁻³ for a first sync of 3 million
 * users, ~5·10⁻⁵ for 100,000. Such a false match can only under-count, never
 * over-count: `add` says the key was present and the count stays, so the
 * caller must count exactly once any `add` said so (FirstSyncLedger does,
 * from the mirror's rows).
 */
export class ListedSet {
  private readonly keys: Uint32Array;
  private readonly limit: number;
  private count = 0;
  /** Keys past the array's limit. */
  private readonly overflow = new FingerprintTable();

  constructor(expectedKeys = 0) {
    const capacity = Math.max(MIN_CAPACITY, Math.ceil(expectedKeys / MAX_LOAD) + 1);
    this.keys = new Uint32Array(capacity);
    this.limit = Math.floor(capacity * MAX_LOAD);
  }

  get size(): number {
    return this.count + this.overflow.size;
  }

  /** Adds the key; false if it, or a key taken for it, was present already. */
  add(hi: number, lo: number): boolean {
    const stored = lo >>> 0 || 1;
    const slot = this.probe(hi, stored);
    if (this.keys[slot] !== 0) return false;
    if (this.count < this.limit) {
      this.keys[slot] = stored;
      this.count++;
      return true;
    }
    if (this.overflow.find(hi, lo) >= 0) return false;
    this.overflow.add(hi, lo);
    return true;
  }

  /** The slot holding `stored` in `hi`'s probe run, else the empty slot where it would go. */
  private probe(hi: number, stored: number): number {
    const { keys } = this;
    const capacity = keys.length;
    let slot = homeSlot(hi, 0, capacity);
    for (;;) {
      const word = keys[slot] ?? 0;
      if (word === 0 || word === stored) return slot;
      slot = slot + 1 === capacity ? 0 : slot + 1;
    }
  }
}
