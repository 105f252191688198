/**
 * The files `user-mirror restore` leaves beside a database
 * (src/commands/restore.ts), and what `status` and the next restore say of
 * them:
 *
 * - `<db>.restoring-<pid>` (with its -wal, -shm, -journal): the copy a
 *   restore checks and marks before it installs it. A restore killed before
 *   its end (SIGKILL, the host down) leaves it, as large as the backup. One
 *   whose pid no longer runs is nobody's: the next restore removes it and
 *   says so. One whose pid runs is never touched (a restore in progress, or
 *   a pid reused; either way not ours to judge).
 * - `<db>.replaced-<stamp>` (with its -wal): the file a restore replaced,
 *   kept for the operator, who may need it (the events and history it held
 *   after the backup exist nowhere else). Nothing deletes it; `status` names
 *   them (count, bytes, the oldest) and docs/backup.md says how to
 *   remove them once a restore is confirmed.
 *
 * The decisions are pure; reading the folder and removing are the thin part.
 */
import { readdirSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Holder } from '../runtime/open-holders.js';
import { pidAlive } from '../../db/sync-lease.js';

/** The suffixes SQLite puts beside a database: a leftover copy's own companions. */
const COMPANIONS = ['-wal', '-shm', '-journal'];

export interface Leftover {
  /** The copy's path (its companions go with it). */
  path: string;
  pid: number;
  /** The copy and its companions. */
  bytes: number;
}

export interface ReplacedFiles {
  count: number;
  /** The files and their -wal. */
  bytes: number;
  /** The oldest's path and when it was replaced. */
  oldest: { path: string; at: string };
}

export interface RestoreFiles {
  leftovers: Leftover[];
  /** Null when the folder holds none. */
  replaced: ReplacedFiles | null;
}

/** `20261128T051500123Z` (backupStamp) as an ISO time; undefined for anything else. */
export function stampTime(stamp: string): string | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{3})Z$/.exec(stamp);
  if (m === null) return undefined;
  const iso = `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}.${m[7]}Z`;
  return Number.isNaN(Date.parse(iso)) ? undefined : iso;
}

/** A name in the folder of `db` and what it is: a restore's copy (by pid), a replaced file (by stamp), or neither. */
export function restoreFileKind(
  name: string,
  db: string,
): { kind: 'restoring'; pid: number } | { kind: 'replaced'; at: string } | { kind: 'companion' } | undefined {
  const base = basename(db);
  if (!name.startsWith(`${base}.`)) return undefined;
  const rest = name.slice(base.length + 1);
  const restoring = /^restoring-(\d+)(-wal|-shm|-journal)?$/.exec(rest);
  if (restoring !== null) return restoring[2] === undefined ? { kind: 'restoring', pid: Number(restoring[1]) } : { kind: 'companion' };
  const replaced = /^replaced-(\d{8}T\d{9}Z)(-wal)?$/.exec(rest);
  if (replaced === null) return undefined;
  if (replaced[2] !== undefined) return { kind: 'companion' };
  const at = stampTime(replaced[1] ?? '');
  return at === undefined ? undefined : { kind: 'replaced', at };
}

/** Pure: what is beside `db`, from the folder's names and a size for each path (0 for none). */
export function classifyRestoreFiles(names: readonly string[], db: string, sizeOf: (path: string) => number): RestoreFiles {
  const dir = dirname(db);
  const withCompanions = (path: string, suffixes: readonly string[]) =>
    sizeOf(path) + suffixes.reduce((n, s) => n + (names.includes(basename(path) + s) ? sizeOf(path + s) : 0), 0);
  const leftovers: Leftover[] = [];
  const replaced: Array<{ path: string; at: string; bytes: number }> = [];
  for (const name of [...names].sort()) {
    const kind = restoreFileKind(name, db);
    const path = join(dir, name);
    if (kind?.kind === 'restoring') leftovers.push({ path, pid: kind.pid, bytes: withCompanions(path, COMPANIONS) });
    if (kind?.kind === 'replaced') replaced.push({ path, at: kind.at, bytes: withCompanions(path, ['-wal']) });
  }
  const oldest = replaced[0];
  return {
    leftovers,
    replaced:
      oldest === undefined
        ? null
        : { count: replaced.length, bytes: replaced.reduce((n, r) => n + r.bytes, 0), oldest: { path: oldest.path, at: oldest.at } },
  };
}

/** What is beside `db` now; nothing when its folder cannot be read. */
export function restoreFilesBeside(db: string): RestoreFiles {
  let names: string[];
  try {
    names = readdirSync(dirname(db));
  } catch {
    return { leftovers: [], replaced: null };
  }
  return classifyRestoreFiles(names, db, (path) => {
    try {
      return statSync(path).size;
    } catch {
      return 0;
    }
  });
}

/** Pure: of the leftovers, those no running process can still be writing (their pid does not run), and the rest. */
export function splitLeftovers(leftovers: readonly Leftover[], runs: (pid: number) => boolean): { dead: Leftover[]; live: Leftover[] } {
  return { dead: leftovers.filter((l) => !runs(l.pid)), live: leftovers.filter((l) => runs(l.pid)) };
}

/** Removes the copies killed restores left beside `db` (pid no longer running); returns what was removed and what was kept. */
export function removeDeadLeftovers(db: string): { removed: Leftover[]; kept: Leftover[] } {
  const { dead, live } = splitLeftovers(restoreFilesBeside(db).leftovers, pidAlive);
  for (const l of dead) for (const suffix of ['', ...COMPANIONS]) rmSync(`${l.path}${suffix}`, { force: true });
  return { removed: dead, kept: live };
}

/**
 * Who holds `target`, and what to stop: Litestream is not the daemon, and
 * `pm2 stop user-mirror` leaves it holding the file (and, left running, it
 * would replicate the restore onto the generation of the file it replaced).
 */
export function holdersAdvice(target: string, holders: readonly Holder[]): string {
  const who = holders.map((h) => `pid ${h.pid} (${h.command})`).join(', ');
  const isLitestream = (h: Holder) => /(^|\/)litestream(\s|$)/.test(h.command);
  const stop = [
    ...(holders.some(isLitestream)
      ? ['stop Litestream (systemctl stop litestream-user-mirror as docs/backup.md sets it up; start it again after the restore)']
      : []),
    ...(holders.some((h) => !isLitestream(h)) ? ['stop the daemon and any `serve` or `sqlite3` holding it (pm2 stop user-mirror)'] : []),
  ];
  return `${target} is open in ${who}: ${stop.join('; ')}, then restore`;
}
