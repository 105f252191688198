/**
 * Which older or odd shapes a legacy record shows. The live service sends
 * today's shape (what the official SDK requires); these come only when a
 * directory is asked for a share of legacy records, to exercise a client's
 * tolerance. Each quirk is a bit; a legacy record always shows at least one,
 * so "shows a quirk" and "is legacy" are the same thing to an observer.
 */
import type { Prng } from './prng.js';

/** Connected sources carry only the deprecated `source`, no `provider`. */
export const SOURCE_ONLY = 1 << 0;
/** No top-level `created_on`. */
export const NO_CREATED_ON = 1 << 1;
/** `fallback_time_zone` absent, not even null. */
export const NO_TIME_ZONE = 1 << 2;
/** `ingestion_start` / `ingestion_end` hold placeholder text, as in the SDK's own wire tests. */
export const PLACEHOLDER_INGESTION = 1 << 3;
/** The first connected source's `source` descriptor has `slug: ""`. */
export const EMPTY_SLUG = 1 << 4;
/** Top-level `created_on` without an offset: `2021-03-04T05:06:07`. */
export const NAIVE_CREATED_ON = 1 << 5;
/** One more connected source with neither `provider` nor `source`. */
export const BARE_SOURCE = 1 << 6;

const QUIRK_COUNT = 7;
/** Quirks that only show on a record with at least one connected source. */
export const NEEDS_A_SOURCE = SOURCE_ONLY | EMPTY_SLUG;
/** Besides its one guaranteed quirk, a legacy record shows each other one with this chance. */
const EXTRA_QUIRK_CHANCE = 0.15;

export function drawQuirks(prng: Prng): number {
  const primary = 1 << prng.int(0, QUIRK_COUNT - 1);
  let quirks = primary;
  for (let bit = 1; bit < 1 << QUIRK_COUNT; bit <<= 1) if (prng.chance(EXTRA_QUIRK_CHANCE)) quirks |= bit;
  // An offset-less created_on needs a created_on: keep whichever was guaranteed.
  if ((quirks & NO_CREATED_ON) !== 0 && (quirks & NAIVE_CREATED_ON) !== 0) {
    quirks &= ~(primary === NAIVE_CREATED_ON ? NO_CREATED_ON : NAIVE_CREATED_ON);
  }
  return quirks;
}

/** The share as a uint32 bound: record i is legacy when its 32-bit hash falls below it. */
export function legacyBound(share: number): number {
  if (!(share >= 0 && share <= 1)) throw new RangeError(`legacyRecords must be a share from 0 to 1, got ${share}`);
  return Math.round(share * 0x1_0000_0000);
}
