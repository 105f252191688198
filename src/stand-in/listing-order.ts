/**
 * The listing faults of the stand-in (./faults.ts): an order that changes
 * between pages, and a page that repeats another. The live service has no
 * documented order (live-service-notes.md), so either may happen to a
 * client paging through it; a mirror must not call such a listing complete.
 *
 * An order is a permutation of the listing's positions, p → (a·p + b) mod n
 * with a coprime to n: a bijection (every user is somewhere, once), computed
 * per position, so memory does not grow with the directory. It is drawn from
 * a key and the directory's size, so a directory that grows or shrinks under
 * it is listed in yet another order, as a service without one would.
 */
import { hash32 } from './random.js';

/** How one list request is served: which offset's users it carries, and in which order. */
export interface ListingView {
  /** The offset whose users the page at `offset` carries: itself, unless it repeats another. */
  sourceOffset(offset: number): number;
  /** The order's key; undefined: the directory's own order. */
  orderKey: number | undefined;
}

export const PLAIN_LISTING: ListingView = { sourceOffset: (offset) => offset, orderKey: undefined };

/** The order `key` of a listing of `n` users: a listing position to the position in the directory's own order. */
export function listingOrder(n: number, key: number): (position: number) => number {
  if (n <= 1) return (position) => position;
  const b = hash32(key, n, 1) % n;
  let a = (hash32(key, n, 0) % (n - 1)) + 1;
  while (gcd(a, n) !== 1) a = a + 1 < n ? a + 1 : 1;
  return (position) => mulAddMod(a, position, b, n);
}

function gcd(x: number, y: number): number {
  while (y !== 0) [x, y] = [y, x % y];
  return x;
}

/** (a·p + b) mod n, exact past 2^53 too. */
function mulAddMod(a: number, p: number, b: number, n: number): number {
  const product = a * p;
  if (Number.isSafeInteger(product + b)) return (product + b) % n;
  return Number((BigInt(a) * BigInt(p) + BigInt(b)) % BigInt(n));
}
