/**
 * Which processes on this host hold a file open: what `fuser` tells, read
 * from /proc/<pid>/fd. A restore must not replace a mirror under a process
 * that holds it (the daemon, `serve`, a sync, a lingering `sqlite3`): that
 * process would go on writing or serving the replaced file. Processes of
 * other accounts are not visible without privileges, and another host on a
 * shared file system not at all: the sync lease covers those.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { resolve } from 'node:path';

export interface Holder {
  pid: number;
  command: string;
  path: string;
}

/** Processes other than this one holding any of `paths` open (Linux; elsewhere none can be seen). */
export function openHolders(paths: readonly string[]): Holder[] {
  const wanted = new Set(paths.map((p) => resolve(p)));
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid);
  } catch {
    return [];
  }
  const found: Holder[] = [];
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone, or another account's
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (!wanted.has(target)) continue;
      found.push({ pid: Number(pid), command: commandOf(pid), path: target });
      break;
    }
  }
  return found;
}

function commandOf(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ').slice(0, 200);
  } catch {
    return '?';
  }
}
