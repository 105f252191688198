/**
 * The WAL index header as db/wal-index.ts reads it, and the verdict
 * `status` draws from it (pure): built byte by byte from SQLite's documented
 * layout (https://sqlite.org/walformat.html). The same figures read from a
 * live mirror: test/wal-external-checkpoints.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseWalIndex } from '../db/wal-index.js';
import { walVerdict } from '../src/health/wal-verdict.js';

function header(o: { frames: number; backfilled: number; pageField?: number; init?: number; version?: number }, le = true): Buffer {
  const b = Buffer.alloc(136);
  const u32 = (at: number, v: number) => (le ? b.writeUInt32LE(v, at) : b.writeUInt32BE(v, at));
  u32(0, o.version ?? 3_007_000);
  u32(8, 7);
  b[12] = o.init ?? 1;
  if (le) b.writeUInt16LE(o.pageField ?? 16_384, 14);
  else b.writeUInt16BE(o.pageField ?? 16_384, 14);
  u32(16, o.frames);
  b.copy(b, 48, 0, 48);
  u32(96, o.backfilled);
  return b;
}

describe('parseWalIndex', () => {
  it('reads the frames, those copied, and the bytes not yet copied (a 16 KiB page and its 24-byte frame header)', () => {
    expect(parseWalIndex(header({ frames: 579, backfilled: 100 }), true)).toEqual({
      frames: 579,
      backfilledFrames: 100,
      pendingBytes: 479 * 16_408,
      frameBytes: 16_408,
    });
    expect(parseWalIndex(header({ frames: 10, backfilled: 10 }, false), false)?.pendingBytes).toBe(0);
    // 65536-byte pages are stored as 1.
    expect(parseWalIndex(header({ frames: 2, backfilled: 0, pageField: 1 }), true)?.frameBytes).toBe(65_560);
  });

  it('is undefined for what is not a settled, initialized index: a header mid-update, uninitialized, another version, too short', () => {
    const torn = header({ frames: 5, backfilled: 0 });
    torn.writeUInt32LE(6, 16);
    expect(parseWalIndex(torn, true)).toBeUndefined();
    expect(parseWalIndex(header({ frames: 5, backfilled: 0, init: 0 }), true)).toBeUndefined();
    expect(parseWalIndex(header({ frames: 5, backfilled: 0, version: 1 }), true)).toBeUndefined();
    expect(parseWalIndex(Buffer.alloc(40), true)).toBeUndefined();
  });
});

describe('walVerdict', () => {
  const index = { frames: 600, backfilledFrames: 600, pendingBytes: 0, frameBytes: 16_408 };
  const files = { mirrorBytes: 200 * 2 ** 20, walBytes: 180 * 2 ** 20, walIndex: index };

  it('after-sync: the WAL file is the measure (each sync truncates it)', () => {
    expect(walVerdict(files, 64 * 2 ** 20)).toMatchObject({ checkpoints: 'after-sync', tooLarge: true, pendingBytes: 0 });
  });

  it('external: what is not yet copied is the measure, the file keeps its largest size; without an index, the file', () => {
    expect(walVerdict(files, 64 * 2 ** 20, 'external')).toMatchObject({ checkpoints: 'external', tooLarge: false, pendingBytes: 0 });
    const waiting = { ...index, backfilledFrames: 0, pendingBytes: 600 * 16_408 };
    expect(walVerdict({ ...files, walIndex: waiting }, 1024, 'external')).toMatchObject({ tooLarge: true, pendingBytes: 600 * 16_408 });
    expect(walVerdict({ ...files, walIndex: undefined }, 64 * 2 ** 20, 'external').tooLarge).toBe(true);
    // No WAL file: nothing waits, whatever an old index says.
    expect(walVerdict({ ...files, walBytes: 0, walIndex: waiting }, 1024, 'external')).toMatchObject({ tooLarge: false, pendingBytes: 0 });
  });
});
