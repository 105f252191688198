import { describe, expect, it } from 'vitest';
import { FingerprintTable, homeSlot } from '../src/sync/fingerprint-table.js';
import { fingerprint64 } from '../src/sync/fingerprint.js';

const fp = (s: string, from = 0): [number, number] => {
  const out = new Uint32Array(2);
  fingerprint64(s, out, 0, 0, from);
  return [out[0] ?? 0, out[1] ?? 0];
};

describe('FingerprintTable', () => {
  it('finds what was added, with its flags, and nothing else', () => {
    const t = new FingerprintTable();
    expect(t.find(1, 2)).toBe(-1);
    const slot = t.add(1, 2);
    t.setFlagsAt(slot, 5);
    expect(t.find(1, 2)).toBe(slot);
    expect(t.find(2, 1)).toBe(-1);
    // Halves are compared as unsigned: -1 and 0xffffffff are one key.
    const high = t.add(-1, 7);
    expect(t.find(0xffffffff, 7)).toBe(high);
    expect(t.flagsAt(slot)).toBe(5);
    expect(t.size).toBe(2);
  });

  it('keeps a key of all zero bits apart from an empty slot', () => {
    const t = new FingerprintTable();
    expect(t.find(0, 0)).toBe(-1);
    const slot = t.add(0, 0);
    expect(t.find(0, 0)).toBe(slot);
    expect(t.flagsAt(slot)).toBe(0);
  });

  it('grows past 85% full, keeping every key and flag', () => {
    const t = new FingerprintTable();
    const start = t.capacity;
    const n = start * 3;
    for (let i = 0; i < n; i++) {
      const slot = t.add(i * 7919, i);
      t.setFlagsAt(slot, i % 16);
    }
    expect(t.size).toBe(n);
    expect(t.capacity).toBeGreaterThanOrEqual(n / 0.85);
    for (let i = 0; i < n; i++) {
      const slot = t.find(i * 7919, i);
      expect(slot).toBeGreaterThanOrEqual(0);
      expect(t.flagsAt(slot)).toBe(i % 16);
    }
  });

  it('probes past keys that share a home slot', () => {
    const t = new FingerprintTable();
    // Same hi ^ lo: one home slot for all three.
    const keys: Array<[number, number]> = [
      [0, 5],
      [1, 4],
      [2, 7],
    ];
    const slots = keys.map(([hi, lo]) => t.add(hi, lo));
    expect(new Set(slots).size).toBe(3);
    keys.forEach(([hi, lo], i) => expect(t.find(hi, lo)).toBe(slots[i]));
  });

  it('keeps four flag bits beside each key without changing the key, and 59 bits of the key', () => {
    const t = new FingerprintTable();
    const key: [number, number] = [0x07ffffff, 0xffffffff];
    const slot = t.add(...key);
    for (const bits of [0, 1, 2, 4, 8, 15]) {
      t.setFlagsAt(slot, bits);
      expect(t.flagsAt(slot)).toBe(bits);
      expect(t.find(...key)).toBe(slot);
    }
    // Bits beyond the four are not kept.
    t.setFlagsAt(slot, 0x1f);
    expect(t.flagsAt(slot)).toBe(15);
    // The high half's top 5 bits are dropped: these are the same key as `key`, and no other key is.
    expect(t.find(0xffffffff, 0xffffffff)).toBe(slot);
    expect(t.find(0x87ffffff, 0xffffffff)).toBe(slot);
    expect(t.find(0x07fffffe, 0xffffffff)).toBe(-1);
    expect(() => t.add(0xf7ffffff, 0xffffffff)).toThrow(/already present/);
  });

  it('refuses to add a key twice', () => {
    const t = new FingerprintTable();
    t.add(3, 4);
    expect(() => t.add(3, 4)).toThrow(/already present/);
  });

  it('sizes itself for the expected keys, 85% full, and holds them without growing', () => {
    const t = new FingerprintTable(100_000);
    expect(t.capacity).toBe(117_649);
    for (let i = 0; i < 100_000; i++) t.add(i, i * 31);
    expect(t.capacity).toBe(117_649);
    expect(t.find(99_999, 99_999 * 31)).toBeGreaterThanOrEqual(0);
  });

  it('wraps a probe from the last slot to the first', () => {
    const t = new FingerprintTable();
    const last = t.capacity - 1;
    let x = 0;
    while (homeSlot(0, x, t.capacity) !== last) x++;
    // Two keys with the same hi ^ lo, so the same home: the last slot.
    const a = t.add(0, x);
    const b = t.add(1, x ^ 1);
    expect([a, b]).toEqual([last, 0]);
    expect([t.find(0, x), t.find(1, x ^ 1)]).toEqual([last, 0]);
  });
});

describe('fingerprint64', () => {
  it('is deterministic and tells near-identical user_ids apart', () => {
    const id = '3f2a9c1e-0b7d-4e5f-9a8b-1c2d3e4f5a6b';
    expect(fp(id)).toEqual(fp(id));
    expect(fp(id)).not.toEqual(fp(`${id.slice(0, -1)}c`));
    expect(fp('a')).not.toEqual(fp('a\u0000'));
    expect(fp('')).not.toEqual(fp('\u0000'));
  });

  it('reads a string from `from` on as the rest of it', () => {
    expect(fp('v3:abcdef', 3)).toEqual(fp('abcdef'));
    expect(fp('v3:abcdef', 3)).not.toEqual(fp('v3:abcdef'));
    expect(fp('\u0100xyz', 1)).toEqual(fp('xyz'));
  });

  it('tells apart characters that differ above their low byte (a byte a character only when every one fits)', () => {
    expect(fp('xA')).not.toEqual(fp('x\u0141'));
    expect(fp('\u0100')).not.toEqual(fp('\u0000\u0001'));
    expect(fp('abcd\u00e9')).not.toEqual(fp('abcd\u01e9'));
    expect(fp('é-1')).toEqual(fp('é-1'));
  });

  it('has no collision, on either half, over 200,000 sequential uuids', () => {
    const full = new Set<string>();
    const his = new Set<number>();
    const n = 200_000;
    for (let i = 0; i < n; i++) {
      const [hi, lo] = fp(`00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`);
      full.add(`${hi}:${lo}`);
      his.add(hi);
    }
    expect(full.size).toBe(n);
    // 32 bits over 200,000 keys: ~5 collisions expected by chance, far more would mean poor mixing.
    expect(his.size).toBeGreaterThan(n - 30);
  });
});
