/**
 * The file system holding MIRROR_DB, judged (pure): `full` when a write of
 * a page or a `-shm` chunk would fail (db/disk-space.ts FULL_BELOW_BYTES),
 * `low` below MIRROR_DISK_WARN_BYTES, else `ok`. `status` exits 1 on either:
 * an operator acts before the sync, the checkpoint and the history stop.
 * Readers keep answering on a full disk (db/wal-pair.ts); nothing else does.
 */
import { FULL_BELOW_BYTES, type DiskSpace } from '../../db/disk-space.js';

export interface DiskVerdict extends DiskSpace {
  warnBelowBytes: number;
  state: 'ok' | 'low' | 'full';
}

export function diskVerdict(space: DiskSpace, warnBelowBytes: number): DiskVerdict {
  const state = space.freeBytes < FULL_BELOW_BYTES ? 'full' : space.freeBytes < warnBelowBytes ? 'low' : 'ok';
  return { ...space, warnBelowBytes, state };
}
