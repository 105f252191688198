import { describe, expect, it } from 'vitest';
import { RunLedger, type Fingerprint64 } from '../src/sync/run-ledger.js';

const ledger = (fingerprint?: Fingerprint64) =>
  new RunLedger(
    new Map([
      ['a', 'h-a'],
      ['b', 'h-b'],
      ['c', 'h-c'],
    ]),
    fingerprint,
  );

const unseen = (l: RunLedger, ids: readonly string[]) => ids.filter((id) => l.isUnseenActive(id));

/** A fingerprint under which `alias` collides with `target`, and every other string is itself. */
function colliding(alias: string, target: string): Fingerprint64 {
  return (s, out) => {
    const key = s === alias ? target : s;
    out[0] = key.length;
    out[1] = [...key].reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) | 0, 7);
  };
}

describe('RunLedger', () => {
  it('tells unchanged, changed and new users apart, and counts what is left unseen', () => {
    const l = ledger();
    expect(l.unseenActiveCount).toBe(3);
    expect(l.sight('a', 'h-a')).toBe('unchanged');
    expect(l.sight('b', 'other')).toBe('write');
    expect(l.sight('new', 'h-new')).toBe('write');
    expect(l.unseenActiveCount).toBe(1);
    expect(l.seenCount).toBe(3);
    expect(unseen(l, ['a', 'b', 'c', 'new', 'never-listed'])).toEqual(['c']);
  });

  it('flags repeats, judged against the mirror, and does not count them twice', () => {
    const l = ledger();
    l.sight('a', 'h-a');
    l.sight('new', 'x');
    expect(l.sight('a', 'changed')).toBe('repeat-write');
    expect(l.sight('a', 'h-a')).toBe('repeat-unchanged');
    expect(l.sight('new', 'x')).toBe('repeat-write');
    expect(l.unseenActiveCount).toBe(2);
    expect(l.seenCount).toBe(2);
  });

  it('counts an unparsable listing as a sighting, so the user is not swept', () => {
    const l = ledger();
    l.sightUnparsed('c');
    l.sightUnparsed('c');
    l.sightUnparsed('unknown');
    expect(unseen(l, ['a', 'b', 'c', 'unknown'])).toEqual(['a', 'b']);
    expect(l.seenCount).toBe(2);
    expect(l.sight('c', 'h-c')).toBe('repeat-unchanged');
  });

  it('holds thousands of users past its first growth', () => {
    const n = 5_000;
    const ids = Array.from({ length: n }, (_, i) => `user-${i}`);
    const l = new RunLedger(ids.map((id) => [id, `h-${id}`] as const));
    for (let i = 0; i < n; i += 2) expect(l.sight(ids[i] ?? '', `h-${ids[i]}`)).toBe('unchanged');
    for (let i = 0; i < n; i++) expect(l.sight(`new-${i}`, 'h')).toBe('write');
    expect(l.unseenActiveCount).toBe(n / 2);
    expect(l.seenCount).toBe(n / 2 + n);
    expect(unseen(l, ids)).toHaveLength(n / 2);
  });

  describe('on a fingerprint collision, errs on the safe side', () => {
    it('a new user colliding with an active one is staged, and the active one is not swept', () => {
      const l = ledger(colliding('intruder', 'c'));
      expect(l.sight('intruder', 'h-intruder')).toBe('write');
      expect(unseen(l, ['a', 'b', 'c'])).toEqual(['a', 'b']);
      // The real user then reads as a repeat: drift, which refuses the sweep.
      expect(l.sight('c', 'h-c')).toBe('repeat-unchanged');
    });

    it('an active user listed first makes the colliding new one a staged repeat', () => {
      const l = ledger(colliding('intruder', 'c'));
      expect(l.sight('c', 'h-c')).toBe('unchanged');
      expect(l.sight('intruder', 'h-intruder')).toBe('repeat-write');
    });

    it('two active users sharing a slot are never judged unchanged, and count once', () => {
      const l = new RunLedger(
        [
          ['a', 'h-a'],
          ['twin', 'h-twin'],
        ],
        colliding('twin', 'a'),
      );
      expect(l.unseenActiveCount).toBe(1);
      expect(l.sight('a', 'h-a')).toBe('write');
      expect(l.sight('twin', 'h-a')).toBe('repeat-write');
      expect(unseen(l, ['a', 'twin'])).toEqual([]);
    });
  });
});
