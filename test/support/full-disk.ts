/**
 * A full disk for tests: a file written on a small tmpfs the test mounts
 * (root) until the file system says ENOSPC.
 */
import { closeSync, openSync, writeSync } from 'node:fs';

/** Writes `path` until the file system is full; returns how many bytes fit. */
export function fill(path: string): number {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(16 * 1024);
  let written = 0;
  try {
    for (;;) written += writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    closeSync(fd);
  }
  return written;
}
