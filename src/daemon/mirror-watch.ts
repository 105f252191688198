/**
 * The mirror file the daemon opened, watched by its device and inode.
 *
 * A mirror deleted or replaced under a running daemon (an `rm`, a `mv` of a
 * copy over it) used to go unnoticed: the daemon and its replica kept the
 * old file open and answered from it, while each sync child opened the path
 * afresh and began a new history in a new, empty file. The mirror is a
 * system of record, so this is never resolved silently: from the first
 * check that sees it (every sync, every /metrics scrape and /readyz) the
 * daemon refuses every sync, fails /readyz, shows
 * `user_mirror_mirror_file_lost{reason}` 1, closes its replica, and records
 * the loss beside the mirror (src/sync/attempt-record.ts), so `status` exits 1
 * naming it. The operator decides: restore the file (`user-mirror restore`)
 * or move it away to start afresh, then restart the daemon, which adopts
 * whatever file is at MIRROR_DB then.
 *
 * A copy written over the file in place (`cp` onto it) keeps the inode and
 * is not seen here; it is also what corrupts a live SQLite file, which is
 * why docs/backup.md gives the restore command instead.
 */
import { fileIdentity, judgeIdentity, lossMessage, type FileIdentity, type LossKind } from '../../db/file-identity.js';

export interface MirrorLoss {
  what: LossKind;
  at: string;
  /** The one sentence status, /readyz, a refused sync and the log give. */
  message: string;
}

/** Checks the path against the identity opened; the first loss seen is kept (the daemon's own connection still holds the old file). */
export class MirrorWatch {
  private loss: MirrorLoss | undefined;

  constructor(
    readonly path: string,
    readonly opened: FileIdentity,
    private readonly onLost: (loss: MirrorLoss) => void,
  ) {}

  check(now = new Date()): MirrorLoss | undefined {
    if (this.loss !== undefined) return this.loss;
    let what: LossKind | undefined;
    try {
      what = judgeIdentity(this.opened, fileIdentity(this.path));
    } catch {
      return undefined; // the folder unreadable for a moment: not a verdict on the file
    }
    if (what === undefined) return undefined;
    this.loss = { what, at: now.toISOString(), message: lossMessage(this.path, what) };
    this.onLost(this.loss);
    return this.loss;
  }
}
