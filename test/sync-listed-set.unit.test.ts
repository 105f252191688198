import { describe, expect, it } from 'vitest';
import { ListedSet } from '../src/sync/listed-set.js';
import { FirstSyncLedger } from '../src/sync/run-ledger.js';
import type { Fingerprint64 } from '../src/sync/fingerprint.js';
import { homeSlot } from '../src/sync/fingerprint-table.js';

/** A fingerprint whose halves the test chooses: `hi:lo` as two integers, anything else one integer in both. */
const chosen: Fingerprint64 = (s, out) => {
  const [hi, lo = hi] = s.split(':').map(Number);
  out[0] = hi ?? 0;
  out[1] = lo ?? 0;
};

describe('ListedSet', () => {
  it('adds a key once, and finds it again', () => {
    const s = new ListedSet();
    expect(s.add(1, 2)).toBe(true);
    expect(s.add(3, 4)).toBe(true);
    expect(s.add(1, 2)).toBe(false);
    expect(s.size).toBe(2);
  });

  it('stores a low half of 0 (the empty word) as a key like any other', () => {
    const s = new ListedSet();
    expect(s.add(7, 0)).toBe(true);
    expect(s.add(7, 0)).toBe(false);
    expect(s.size).toBe(1);
  });

  it('takes two keys with one low half for one only when one lies in the other probe run: an under-count, said by add', () => {
    const s = new ListedSet();
    expect(s.add(5, 99)).toBe(true);
    // Same home, same low half: taken for the first.
    expect(s.add(5, 99)).toBe(false);
    // Another home far away, same low half: its own key.
    expect(s.add(0x80000000, 99)).toBe(true);
    expect(s.size).toBe(2);
  });

  it('holds a listing that outgrows the total it was sized for, every key still found once', () => {
    const s = new ListedSet(1_000);
    const n = 50_000;
    for (let i = 1; i <= n; i++) expect(s.add(Math.imul(i, 0x9e3779b1), i)).toBe(true);
    for (let i = 1; i <= n; i += 97) expect(s.add(Math.imul(i, 0x9e3779b1), i)).toBe(false);
    expect(s.size).toBe(n);
  });
});

describe('FirstSyncLedger', () => {
  it('counts distinct users from its set while nothing was found in it, without reading the rows', () => {
    const l = new FirstSyncLedger(10, chosen);
    for (const id of ['1:1', '2:2', '3:3']) l.sight(id);
    expect(l.seenCount).toBe(3);
    expect(l.distinctCount(() => expect.unreachable('no row is read while the set is exact'))).toBe(3);
  });

  it('counts a repeat listing once', () => {
    const l = new FirstSyncLedger(10, chosen);
    for (const id of ['1:1', '2:2', '1:1']) l.sight(id);
    expect(l.distinctCount(() => ['1:1', '2:2', '1:1'])).toBe(2);
  });

  it('counts exactly from the rows written when the set took two users for one (a false match under-counts it)', () => {
    // Two high halves with one home in a set of 1,024 slots, and one low half: the set keeps 32 bits and takes them for one.
    const hiA = 1;
    let hiB = 2;
    while (homeSlot(hiB, 0, 1024) !== homeSlot(hiA, 0, 1024)) hiB++;
    const twins: Fingerprint64 = (s, out) => {
      out[0] = s === 'a' ? hiA : hiB;
      out[1] = 42;
    };
    const l = new FirstSyncLedger(10, twins);
    l.sight('a');
    l.sight('b');
    expect(l.seenCount).toBe(1);
    expect(l.distinctCount(() => ['a', 'b'])).toBe(2);
  });

  it('takes a record sighted and then rejected on its page for one user, without reading the rows', () => {
    const l = new FirstSyncLedger(10, chosen);
    l.sight('1:1');
    l.sight('2:2');
    l.sightUnparsed('2:2');
    expect(l.seenCount).toBe(2);
    expect(l.distinctCount(() => expect.unreachable('no row is read: nothing was found in the set but that record'))).toBe(2);
  });

  it('counts a user only rejected records named, once, and once more only if no row holds it', () => {
    const l = new FirstSyncLedger(10, chosen);
    l.sight('1:1');
    l.sightUnparsed('2:2');
    l.sightUnparsed('2:2');
    l.sightUnparsed('1:1');
    expect(l.seenCount).toBe(2);
    expect(l.distinctCount(() => ['1:1'])).toBe(2);
  });
});
