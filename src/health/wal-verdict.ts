/**
 * The WAL against its threshold (pure): what `status`, `/metrics` and the
 * alert rules judge the same way. See walVerdict for what is measured in
 * each checkpoint mode.
 */
import type { CheckpointMode } from '../../db/open.js';
import type { WalIndexFigures } from '../../db/wal-index.js';

/** Below this a WAL is never a problem: a first sync's WAL is the size of the mirror until its checkpoint. */
const WAL_WARN_FLOOR_BYTES = 64 * 1024 * 1024;

/** The WAL against its threshold, and who checkpoints it. */
export interface WalVerdict {
  walBytes: number;
  mirrorBytes: number;
  warnAtBytes: number;
  tooLarge: boolean;
  /** MIRROR_CHECKPOINTS: `external` when Litestream owns the checkpoints. */
  checkpoints: CheckpointMode;
  /** Bytes of WAL not yet copied into the mirror file, from the WAL index; undefined when no index could be read. */
  pendingBytes?: number;
  /** Frames in the WAL, and those a checkpoint already copied into the file. */
  frames?: number;
  backfilledFrames?: number;
}

/**
 * Whether the mirror's WAL is too large (pure): above MIRROR_WAL_WARN_BYTES,
 * or by default above half the mirror (at least 64 MiB).
 *
 * `after-sync`: every sync ends with a checkpoint that empties the WAL; one
 * that keeps growing means a reader holds a read transaction open across
 * syncs, so no checkpoint can finish (measured: ~71 MB a sync at 100,000
 * users with churn). The file's size is the measure.
 *
 * `external` (Litestream): its checkpoints copy the WAL without shrinking
 * the file, which keeps its largest size (a first sync's: the size of the
 * mirror) with nothing in it waiting; the measure is then what the WAL index
 * says is not yet copied into the mirror (db/wal-index.ts). That growing
 * means nobody checkpoints: Litestream is not running, or a reader holds it
 * back. Without an index (no connection has the mirror open) the file's size
 * is all that is known.
 */
export function walVerdict(
  files: { mirrorBytes: number; walBytes: number; walIndex?: WalIndexFigures | undefined },
  warnBytes: number | undefined,
  checkpoints: CheckpointMode = 'after-sync',
): WalVerdict {
  const { mirrorBytes, walBytes, walIndex } = files;
  const warnAtBytes = warnBytes ?? Math.max(WAL_WARN_FLOOR_BYTES, Math.floor(mirrorBytes / 2));
  // A WAL file that is gone or empty holds nothing, whatever a stale index says.
  const index = walIndex === undefined || walBytes === 0 ? undefined : walIndex;
  const measured = checkpoints === 'external' ? (index?.pendingBytes ?? walBytes) : walBytes;
  return {
    walBytes,
    mirrorBytes,
    warnAtBytes,
    tooLarge: measured > warnAtBytes,
    checkpoints,
    ...(index === undefined
      ? walBytes === 0
        ? { pendingBytes: 0, frames: 0, backfilledFrames: 0 }
        : {}
      : { pendingBytes: index.pendingBytes, frames: index.frames, backfilledFrames: index.backfilledFrames }),
  };
}
