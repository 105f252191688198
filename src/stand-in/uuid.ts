/** Version-4-shaped UUIDs from deterministic 32-bit words. */
import type { Prng } from './prng.js';

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
