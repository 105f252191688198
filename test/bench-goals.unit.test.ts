/**
 * The rule behind the `met` column of bench:sync and bench:replica
 * (bench/goals.ts), and the CPU lists of bench:sync's pinned set-up
 * (bench/affinity.ts): what bench/README.md promises, `yes` or `no` for what
 * a run measured and `-` for what it did not.
 */
import { describe, expect, it } from 'vitest';
import { parseCpuList } from '../bench/affinity.js';
import { allMet, atLeast, atMost, firstOverScriptGoal, FIRST_SYNC_LARGE, GOALS, metCell } from '../bench/goals.js';

describe('bench goals', () => {
  it('holds a first sync to 1.0× the script below 1,000,000 users and to 1.5× from there', () => {
    expect(firstOverScriptGoal(20_000)).toBe(1.0);
    expect(firstOverScriptGoal(100_000)).toBe(1.0);
    expect(firstOverScriptGoal(FIRST_SYNC_LARGE - 1)).toBe(1.0);
    expect(firstOverScriptGoal(FIRST_SYNC_LARGE)).toBe(1.5);
    expect(firstOverScriptGoal(3_000_000)).toBe(1.5);
  });

  it("states issue 45's goals and the standing ones", () => {
    expect(GOALS).toMatchObject({
      resyncShareOfFloor: 0.8,
      latencyShareOfFloor: 0.85,
      linkShareOfFloor: 0.85,
      linkOverSdk: 5,
      maxRssMbAt3M: 200,
      replicaCpuOverBare: 1.5,
    });
  });

  it('meets a lower bound at the bound and above, not below', () => {
    expect(atLeast(0.8, GOALS.resyncShareOfFloor)).toBe(true);
    expect(atLeast(0.93, GOALS.resyncShareOfFloor)).toBe(true);
    expect(atLeast(0.79, GOALS.resyncShareOfFloor)).toBe(false);
  });

  it('meets an upper bound at the bound and below, not above', () => {
    expect(atMost(1.5, GOALS.replicaCpuOverBare)).toBe(true);
    expect(atMost(1.41, GOALS.replicaCpuOverBare)).toBe(true);
    expect(atMost(1.7, GOALS.replicaCpuOverBare)).toBe(false);
  });

  it('says nothing of a goal the run did not measure', () => {
    expect(atLeast(undefined, 1)).toBeUndefined();
    expect(atMost(undefined, 200)).toBeUndefined();
    expect(atLeast(Number.NaN, 1)).toBeUndefined();
  });

  it('meets a goal of several parts only when every part was measured and met', () => {
    expect(allMet(true, true)).toBe(true);
    expect(allMet(true, false)).toBe(false);
    expect(allMet(undefined, false)).toBe(false);
    expect(allMet(true, undefined)).toBeUndefined();
  });

  it('prints yes, no, or - for not measured', () => {
    expect([true, false, undefined].map(metCell)).toEqual(['yes', 'no', '-']);
  });
});

describe('CPU lists', () => {
  it('reads the kernel CPU list format, ranges included', () => {
    expect(parseCpuList('0,1')).toEqual([0, 1]);
    expect(parseCpuList('0-3,6,8-9\n')).toEqual([0, 1, 2, 3, 6, 8, 9]);
    expect(parseCpuList(' 1')).toEqual([1]);
  });

  it('refuses anything else', () => {
    expect(() => parseCpuList('')).toThrow(RangeError);
    expect(() => parseCpuList('3-1')).toThrow(RangeError);
    expect(() => parseCpuList('0,a')).toThrow(RangeError);
  });
});
