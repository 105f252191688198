/**
 * Which file a path names, by device and inode: how the daemon tells that
 * MIRROR_DB was deleted or replaced under it (src/daemon/mirror-watch.ts),
 * and how its sync child refuses to write into any other file than the one
 * the daemon opened.
 */
import { statSync } from 'node:fs';

export interface FileIdentity {
  dev: number;
  ino: number;
}

export type LossKind = 'deleted' | 'replaced';

/** The file's identity now; undefined when there is no file at `path`. */
export function fileIdentity(path: string): FileIdentity | undefined {
  try {
    const s = statSync(path);
    return { dev: s.dev, ino: s.ino };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Whether the file at the path is still the one opened (pure). */
export function judgeIdentity(opened: FileIdentity, now: FileIdentity | undefined): LossKind | undefined {
  if (now === undefined) return 'deleted';
  return now.dev === opened.dev && now.ino === opened.ino ? undefined : 'replaced';
}

/** The one sentence for a lost mirror: the daemon's (it syncs no more) or a `serve` replica's (it serves the old file no more). */
export function lossMessage(path: string, what: LossKind, holder: 'daemon' | 'replica' = 'daemon'): string {
  const how = what === 'deleted' ? 'was deleted' : 'was replaced by another file';
  if (holder === 'replica')
    return `MIRROR_DB (${path}) ${how} under the running replica: it no longer serves the file it opened; restart user-mirror serve once the mirror is in place`;
  return (
    `MIRROR_DB (${path}) ${how} under the running daemon: it syncs no more and never starts a new history by itself; ` +
    'restore the mirror (user-mirror restore) or move the file away to start afresh, then restart the daemon'
  );
}
