/**
 * How much of the mirror's WAL is not yet in the mirror file, read from the
 * WAL index (`<MIRROR_DB>-shm`) without opening the database or taking a lock.
 *
 * The WAL file's size says this only while user-mirror checkpoints with
 * TRUNCATE after each sync (MIRROR_CHECKPOINTS=after-sync). When Litestream
 * owns the checkpoints (`external`), it copies the WAL into the file with
 * PASSIVE and RESTART checkpoints, which leave the file at its largest size:
 * after a first sync the WAL file stays the size of the mirror while nothing
 * in it waits. The index's header holds the frames in the WAL (mxFrame) and
 * those a checkpoint already copied (nBackfill): their difference is the
 * honest figure. Layout: https://sqlite.org/walformat.html (the wal-index
 * header and the checkpoint info after it, in the host's byte order).
 */
import { fstatSync, openSync, readSync, statSync } from 'node:fs';
import { endianness } from 'node:os';

/** The WAL's frames, those already copied into the mirror file, and the bytes of one frame. */
export interface WalIndexFigures {
  frames: number;
  backfilledFrames: number;
  /** Frames not yet copied, in bytes (frame header included). */
  pendingBytes: number;
  frameBytes: number;
}

/** The header (48 bytes, twice) and the checkpoint info up to nBackfillAttempted. */
const HEADER_BYTES = 136;
/** `iVersion` of every WAL index since SQLite 3.7.0. */
const WAL_INDEX_VERSION = 3_007_000;
/** The 24-byte header in front of each page in the WAL. */
const FRAME_HEADER_BYTES = 24;

/**
 * The figures from the index's first bytes (pure); undefined when they are
 * not a settled, initialized index: a writer mid-update leaves the header's
 * two copies different, and the caller then knows no more than the WAL's size.
 */
export function parseWalIndex(head: Buffer, littleEndian = endianness() === 'LE'): WalIndexFigures | undefined {
  if (head.length < HEADER_BYTES) return undefined;
  const u32 = (at: number) => (littleEndian ? head.readUInt32LE(at) : head.readUInt32BE(at));
  const u16 = (at: number) => (littleEndian ? head.readUInt16LE(at) : head.readUInt16BE(at));
  if (u32(0) !== WAL_INDEX_VERSION || head[12] !== 1) return undefined;
  if (!head.subarray(0, 48).equals(head.subarray(48, 96))) return undefined;
  const sizeField = u16(14);
  const pageBytes = sizeField === 1 ? 65_536 : sizeField;
  const frames = u32(16);
  const backfilledFrames = Math.min(u32(96), frames);
  const frameBytes = pageBytes + FRAME_HEADER_BYTES;
  return { frames, backfilledFrames, pendingBytes: (frames - backfilledFrames) * frameBytes, frameBytes };
}

/**
 * The `-shm` files this process has open, by path: opened once and never
 * closed. SQLite locks the index with POSIX record locks, and closing any
 * descriptor of a file drops every such lock the process holds on it: a
 * daemon (or `status`) reading the index through a descriptor it then closed
 * would silently drop its own connections' read locks, and the next
 * connection to open the mirror would rebuild the index as if it were the
 * only one (measured: nBackfill back to 0 under Litestream's open connection).
 */
const held = new Map<string, { fd: number; dev: number; ino: number }>();

/**
 * Reads the index beside the mirror; undefined when there is none (no
 * connection has the WAL open, or it was never in WAL mode) or it cannot be
 * read or parsed. A stale index left by a crash is read as it is: the next
 * connection rebuilds it. A new file at the path (the last connection closed
 * and another opened) gets a descriptor of its own; the old one stays open,
 * for the reason above.
 */
export function readWalIndex(mirrorPath: string): WalIndexFigures | undefined {
  if (mirrorPath === ':memory:') return undefined;
  const path = `${mirrorPath}-shm`;
  try {
    const now = statSync(path);
    let h = held.get(path);
    if (h === undefined || h.dev !== now.dev || h.ino !== now.ino) {
      const fd = openSync(path, 'r');
      const opened = fstatSync(fd);
      h = { fd, dev: opened.dev, ino: opened.ino };
      held.set(path, h);
    }
    const head = Buffer.alloc(HEADER_BYTES);
    const read = readSync(h.fd, head, 0, HEADER_BYTES, 0);
    return parseWalIndex(head.subarray(0, read));
  } catch {
    return undefined;
  }
}
