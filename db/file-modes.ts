/**
 * Who may read the SQLite files: the mirror and the audit hold a health
 * service's end users (birth dates, connected devices), so they are the
 * account's own, `0600` in a `0700` folder, whatever the umask. With a
 * reader group (MIRROR_GROUP) they are `0640` in a setgid `02750` folder of
 * that group, so the `-wal` and `-shm` files SQLite creates later inherit
 * the group too (SQLite gives them the database file's permission bits, the
 * folder gives them its group).
 *
 * The policy is process-wide, like the umask: the CLI sets it once at start
 * (src/runtime/file-policy.ts); library users get the private default.
 */
import {
  chmodSync,
  chownSync,
  closeSync,
  fchmodSync,
  fchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';

export interface FilePolicy {
  /** Permission bits of every database file (and so of its -wal, -shm and -journal). */
  fileMode: number;
  /** Permission bits of a folder created for one (setgid with a group). */
  dirMode: number;
  /** The reader group's id, or undefined for none. */
  gid: number | undefined;
}

export const PRIVATE_POLICY: FilePolicy = { fileMode: 0o600, dirMode: 0o700, gid: undefined };

/** The policy for a reader group: the group reads, nobody else does. */
export function groupPolicy(gid: number): FilePolicy {
  return { fileMode: 0o640, dirMode: 0o2750, gid };
}

let policy: FilePolicy = PRIVATE_POLICY;

export function setFilePolicy(next: FilePolicy): void {
  policy = next;
}

/** A file whose mode was narrowed at open: it had been readable (or writable) by more accounts than the policy allows. */
export interface Tightened {
  path: string;
  from: number;
  to: number;
}

/** The files SQLite keeps beside a database. */
const COMPANIONS = ['', '-wal', '-shm', '-journal'];

/**
 * Creates the folders up to `path` (the policy's folder mode for the ones it
 * makes) and `path` itself, empty, with the policy's mode from its first
 * byte: there is no moment at which another account could open it. SQLite
 * takes an empty file for an empty database.
 */
export function createPrivateFile(path: string, p: FilePolicy = policy): void {
  createPrivateFolder(dirname(path), p);
  const fd = openSync(path, 'wx', p.fileMode & 0o600);
  try {
    if (p.gid !== undefined) fchownSync(fd, -1, p.gid);
    fchmodSync(fd, p.fileMode);
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates `dir` and the folders up to it with the policy's folder mode
 * (the account's own, or the reader group's), then checks the folder it
 * made by stat: a directory, this account's, with exactly that mode (and
 * group). A file system that does not keep modes or owners (a FAT mount,
 * a network share squashing owners) is refused here, before a database is
 * written into a folder others can read. A folder that already exists is
 * the operator's and is left as it is. Returns the first folder made, or
 * undefined when `dir` existed.
 */
export function createPrivateFolder(dir: string, p: FilePolicy = policy): string | undefined {
  const made = mkdirSync(dir, { recursive: true, mode: p.dirMode });
  if (made === undefined) return undefined;
  // mkdir's mode passes through the umask and drops setgid: set both exactly on the folders made here.
  for (let d = dir; ; d = dirname(d)) {
    if (p.gid !== undefined) chownSync(d, -1, p.gid);
    chmodSync(d, p.dirMode);
    if (d === made || dirname(d) === d) break;
  }
  const s = lstatSync(dir);
  const uid = process.getuid?.();
  const ours = uid === undefined || s.uid === uid;
  const mode = s.mode & 0o7777;
  if (!s.isDirectory() || !ours || mode !== p.dirMode || (p.gid !== undefined && s.gid !== p.gid)) {
    const want = `${octal(p.dirMode)}${uid === undefined ? '' : `, owner ${uid}`}${p.gid === undefined ? '' : `, group ${p.gid}`}`;
    throw new Error(
      `${dir} was created, but is ${s.isDirectory() ? '' : 'not a folder, '}${octal(mode)}, owner ${s.uid}, group ${s.gid} instead of ${want}: its file system does not keep modes or owners`,
    );
  }
  return made;
}

/**
 * Copies `source`'s bytes into `dest`, a file createPrivateFile made,
 * which keeps its mode. Not copyFileSync: it gives the destination the
 * source's mode before the first byte is copied, so a backup made `0644`
 * (`sqlite3 .backup` under umask 022) became a copy of every end user
 * that other accounts could read for as long as it was copied and checked,
 * and after, when the copying process was killed.
 */
export function copyIntoPrivateFile(source: string, dest: string): void {
  const from = openSync(source, 'r');
  try {
    const to = openSync(dest, 'w');
    try {
      const buf = Buffer.allocUnsafe(1 << 20);
      for (let n = readSync(from, buf, 0, buf.length, null); n > 0; n = readSync(from, buf, 0, buf.length, null))
        for (let done = 0; done < n;) done += writeSync(to, buf, done, n - done);
    } finally {
      closeSync(to);
    }
  } finally {
    closeSync(from);
  }
}

/**
 * Narrows a database and its companions to the policy: permission bits the
 * policy does not grant are taken away, and with a group the files are given
 * it. Returns what changed, for the caller to log.
 *
 * With a group the group's read bit is also added where missing (`widened`):
 * a mirror made before MIRROR_GROUP was set is `0600` in a `0700` folder,
 * and giving it to the group without the bit granted nothing. Other accounts
 * are never given a bit.
 */
export function tightenDatabaseFiles(path: string, p: FilePolicy = policy, widened: Tightened[] = []): Tightened[] {
  const changed: Tightened[] = [];
  if (p.gid !== undefined) groupFolder(dirname(path), p.gid, widened);
  for (const suffix of COMPANIONS) {
    const file = `${path}${suffix}`;
    let mode: number;
    let gid: number;
    try {
      const s = statSync(file);
      mode = s.mode & 0o7777;
      gid = s.gid;
    } catch {
      continue;
    }
    if (p.gid !== undefined && gid !== p.gid) chownSync(file, -1, p.gid);
    const narrowed = mode & p.fileMode;
    const target = p.gid === undefined ? narrowed : narrowed | (p.fileMode & 0o040);
    if (target !== mode) chmodSync(file, target);
    if (narrowed !== mode) changed.push({ path: file, from: mode, to: narrowed });
    if (target !== narrowed) widened.push({ path: file, from: narrowed, to: target });
  }
  return changed;
}

/**
 * The folder of a group-readable database: of that group, setgid (so that a
 * -wal or -shm SQLite creates later is the group's too) and open to the
 * group (r-x: a member must reach the files). Its other bits are left alone
 * (the folder may hold more than the mirror); others are never given one.
 */
function groupFolder(dir: string, gid: number, widened: Tightened[]): void {
  const s = statSync(dir);
  if (s.gid !== gid) chownSync(dir, -1, gid);
  const mode = s.mode & 0o7777;
  const target = mode | 0o2050;
  if (target !== mode) {
    chmodSync(dir, target);
    widened.push({ path: dir, from: mode, to: target });
  }
}

/** `0644` for messages. */
export function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8).padStart(3, '0')}`;
}
