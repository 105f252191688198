/**
 * Constant-time key comparison: both sides are hashed first, so neither the
 * content nor the length of the expected key leaks through timing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

export function keyDigest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** `expected` is a digest from keyDigest, computed once by the caller. */
export function offeredKeyMatches(offered: string | string[] | undefined, expected: Buffer): boolean {
  if (typeof offered !== 'string') return false;
  return timingSafeEqual(keyDigest(offered), expected);
}
