import { describe, expect, it } from 'vitest';
import { RunLedger } from '../db/run-ledger.js';

const ledger = () =>
  new RunLedger(
    new Map([
      ['a', 'h-a'],
      ['b', 'h-b'],
      ['c', 'h-c'],
    ]),
  );

describe('RunLedger', () => {
  it('tells unchanged, changed and new users apart, and counts what is left unseen', () => {
    const l = ledger();
    expect(l.unseenActiveCount).toBe(3);
    expect(l.sight('a', 'h-a')).toBe('unchanged');
    expect(l.sight('b', 'other')).toBe('write');
    expect(l.sight('new', 'h-new')).toBe('write');
    expect(l.unseenActiveCount).toBe(1);
    expect(l.seenCount).toBe(3);
    expect([...l.unseenActiveIds()]).toEqual(['c']);
  });

  it('flags repeats, judged against the mirror, and does not count them twice', () => {
    const l = ledger();
    l.sight('a', 'h-a');
    l.sight('new', 'x');
    expect(l.sight('a', 'changed')).toBe('repeat-write');
    expect(l.sight('a', 'h-a')).toBe('repeat-unchanged');
    expect(l.sight('new', 'x')).toBe('repeat-write');
    expect(l.unseenActiveCount).toBe(2);
  });

  it('counts an unparsable listing as a sighting, so the user is not swept', () => {
    const l = ledger();
    l.sightUnparsed('c');
    l.sightUnparsed('c');
    l.sightUnparsed('unknown');
    expect([...l.unseenActiveIds()]).toEqual(['a', 'b']);
    expect(l.sight('c', 'h-c')).toBe('repeat-unchanged');
  });

  it('restarts a pass from the same starting mirror', () => {
    const l = ledger();
    l.sight('a', 'h-a');
    const fresh = l.restart();
    expect(fresh.unseenActiveCount).toBe(3);
    expect(fresh.sight('a', 'h-a')).toBe('unchanged');
  });
});
