/**
 * Whether a file the project writes (the removal audit) can be written now,
 * and if not why: for `status`, `removals` and the daemon's
 * `user_mirror_audit_writable`. Asked of the file system without writing
 * anything, so a read-only command changes nothing: the file and its folder
 * (SQLite writes `-wal` and `-shm` beside it) must be writable by this
 * account (`access(2)`: a read-only mount says EROFS, even to root; another
 * account's 0600 file says EACCES), and the disk must have room
 * (`statfs(2)`: a full disk fails the next write with SQLITE_FULL).
 */
import { accessSync, constants, existsSync, statfsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/** Below this free on the file's disk, writing it counts as failing: one audit transaction needs a few pages, plus the WAL. */
const MIN_FREE_BYTES = 1024 * 1024;

/** Why `path` cannot be written now, or undefined when it can (a file not there yet: its folder must be). */
export function whyNotWritable(path: string, minFreeBytes = MIN_FREE_BYTES): string | undefined {
  const file = resolve(path);
  let folder = dirname(file);
  if (existsSync(file)) {
    const problem = accessProblem(file, constants.R_OK | constants.W_OK);
    if (problem !== undefined) return `${file}: cannot be written (${problem})`;
  } else {
    // The file is created on first use: by the nearest folder that exists.
    while (!existsSync(folder) && dirname(folder) !== folder) folder = dirname(folder);
  }
  const problem = accessProblem(folder, constants.W_OK | constants.X_OK);
  if (problem !== undefined) return `${folder}: the folder cannot be written (${problem}); SQLite writes its -wal and -shm files there`;
  try {
    const fs = statfsSync(folder);
    const free = fs.bavail * fs.bsize;
    if (free < minFreeBytes) return `${folder}: the disk is full (${free} bytes free)`;
  } catch (err) {
    return `${folder}: cannot read the disk's free space (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
  return undefined;
}

function accessProblem(path: string, mode: number): string | undefined {
  try {
    accessSync(path, mode);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EROFS') return 'EROFS: a read-only file system';
    if (code === 'EACCES' || code === 'EPERM') return `${code}: this account may not write it`;
    return code ?? String(err);
  }
}
