/**
 * The file system holding a database: how many bytes are free on it, and
 * whether a SQLite failure was that file system filling. SQLite's own words
 * for a full disk are rarely "database or disk is full": growing the `-shm`
 * reads `disk I/O error (SQLITE_IOERR_SHMSIZE)`, and a failed write of a
 * page `disk I/O error (SQLITE_IOERR_WRITE)`. An operator must read "the
 * file system holding MIRROR_DB (<path>) is full", with the bytes free.
 */
import { accessSync, constants, statfsSync } from 'node:fs';
import { dirname } from 'node:path';

export interface DiskSpace {
  /** Bytes an unprivileged writer may still use (statfs's bavail; root may have a few percent more on ext4). */
  freeBytes: number;
  /** The file system's size. */
  totalBytes: number;
  /** Mounted read-only (a read-only bind, a remount): no write can succeed whatever the bytes free say. */
  readOnly?: boolean;
}

/**
 * Below this many free bytes a SQLite I/O failure is taken for a full disk:
 * SQLite grows its files by a page or a 32 KiB `-shm` chunk at a time, so a
 * write can fail with some KiB still free, never with a MiB free.
 */
export const FULL_BELOW_BYTES = 1024 * 1024;

/** The free space of the file system holding `path` (its folder's); undefined when it cannot be read (no folder). */
export function diskSpace(path: string): DiskSpace | undefined {
  try {
    const s = statfsSync(dirname(path));
    return { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize, readOnly: isReadOnly(dirname(path)) };
  } catch {
    return undefined;
  }
}

/** EROFS for a write access check: the mount is read-only (statfs's flags are not in node's answer). */
function isReadOnly(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EROFS';
  }
}

/** "the file system holding MIRROR_DB (/srv/m.db) is full: 0 bytes free": the one wording status, sync and readers use. */
export function fullDiskWords(path: string, freeBytes: number, variable = 'MIRROR_DB'): string {
  return `the file system holding ${variable} (${path}) is full: ${freeBytes} bytes free`;
}

/** A SQLite error that a full file system causes (SQLITE_FULL, or an I/O error on a write or a `-shm` growth). */
export function isSpaceError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^SQLITE_(FULL|IOERR)/.test(code);
}

/**
 * When `err` is a SQLite space error and the file system holding `path` is
 * (nearly) full, the words naming it; otherwise undefined (an I/O error on a
 * disk with room is something else: a failing device, a vanished mount).
 */
export function fullDiskCause(err: unknown, path: string, variable = 'MIRROR_DB'): string | undefined {
  if (path === ':memory:' || !isSpaceError(err)) return undefined;
  const space = diskSpace(path);
  if (space === undefined || space.freeBytes >= FULL_BELOW_BYTES) return undefined;
  return fullDiskWords(path, space.freeBytes, variable);
}
