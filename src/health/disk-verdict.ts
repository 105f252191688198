/**
 * The file system holding MIRROR_DB, judged (pure): `read-only` when it is
 * mounted so, `full` when a write of a page or a `-shm` chunk would fail
 * (db/disk-space.ts FULL_BELOW_BYTES), `low` below MIRROR_DISK_WARN_BYTES,
 * else `ok`. `status` exits 1 on any but `ok`:
 * an operator acts before the sync, the checkpoint and the history stop.
 * Readers keep answering on a full disk (db/wal-pair.ts); nothing else does.
 */
import { FULL_BELOW_BYTES, type DiskSpace } from '../../db/disk-space.js';

export interface DiskVerdict extends DiskSpace {
  warnBelowBytes: number;
  state: 'ok' | 'low' | 'full' | 'read-only';
}

/** A read-only mount first: its bytes free mean nothing to a writer (a read-only tmpfs showed as "DISK LOW"). */
export function diskVerdict(space: DiskSpace, warnBelowBytes: number): DiskVerdict {
  const state =
    space.readOnly === true ? 'read-only' : space.freeBytes < FULL_BELOW_BYTES ? 'full' : space.freeBytes < warnBelowBytes ? 'low' : 'ok';
  return { ...space, warnBelowBytes, state };
}
