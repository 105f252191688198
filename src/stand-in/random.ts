/**
 * Seeded, stateless-by-index randomness. The stand-in never stores a
 * generated user: it re-derives user i from (seed, i) on every request, so
 * every random choice must be a pure function of those numbers.
 */

/**
 * murmur3's 32-bit finalizer. It is a bijection on uint32, which is what makes
 * `fmix32(index + key)` a collision-free identifier that can be inverted.
 */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Inverse of `fmix32` (multiplicative inverses of its constants mod 2^32). */
export function unfmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x7ed1b41d);
  h ^= (h >>> 13) ^ (h >>> 26);
  h = Math.imul(h, 0xa5cb9243);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Order-sensitive hash of small integers; not a bijection, just well mixed. */
export function hash32(...parts: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const part of parts) h = fmix32((h ^ fmix32((part + 0x9e3779b9) >>> 0)) + 0x6a09e667);
  return h;
}

/** Folds any safe integer (negative, above 2^32) into a 32-bit key. */
export function seedKey(seed: number): number {
  const lo = seed >>> 0;
  const hi = Math.floor(seed / 0x1_0000_0000) >>> 0;
  return hash32(lo, hi);
}

/**
 * sfc32: small, fast, 128 bits of state, so two users whose streams happen
 * to start alike do not stay alike.
 */
export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** Fixed arity on purpose: one Prng is built per generated user, and rest arguments cost. */
  constructor(seedA: number, seedB = 0, seedC = 0) {
    this.a = fmix32(seedA ^ fmix32((seedB + 0x9e3779b9) >>> 0) ^ fmix32((seedC + 0x85ebca6b) >>> 0));
    this.b = fmix32((this.a + 0x6a09e667) >>> 0);
    this.c = fmix32((this.b + 0xbb67ae85) >>> 0);
    this.d = 1;
    for (let i = 0; i < 8; i++) this.nextUint32();
  }

  nextUint32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.nextUint32() / 0x1_0000_0000;
  }

  /** Uniform integer in [min, max] (inclusive). */
  int(min: number, max: number): number {
    return min + Math.floor(this.float() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.float() * items.length)];
    if (item === undefined) throw new RangeError('pick from an empty list');
    return item;
  }
}

/** Version-4-shaped UUIDs from deterministic 32-bit words. */
const VARIANT = ['8', '9', 'a', 'b'] as const;

/** Byte to two hex digits; `Number#toString(16)` plus padding is several times slower. */
const HEX_BYTE = Array.from({ length: 256 }, (_, n) => n.toString(16).padStart(2, '0'));

export function hex8(word: number): string {
  return `${HEX_BYTE[word >>> 24]}${HEX_BYTE[(word >>> 16) & 0xff]}${HEX_BYTE[(word >>> 8) & 0xff]}${HEX_BYTE[word & 0xff]}`;
}

/** The first word survives unchanged, so callers can put a reversible id there. */
export function uuidFromWords(w0: number, w1: number, w2: number, w3: number): string {
  const b = hex8(w1);
  const c = hex8(w2);
  return `${hex8(w0)}-${b.slice(0, 4)}-4${b.slice(5, 8)}-${VARIANT[(w2 >>> 28) & 3]}${c.slice(1, 4)}-${c.slice(4, 8)}${hex8(w3)}`;
}

export function randomUuid(prng: Prng): string {
  return uuidFromWords(prng.nextUint32(), prng.nextUint32(), prng.nextUint32(), prng.nextUint32());
}
