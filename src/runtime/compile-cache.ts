/**
 * Node's compile cache (node:module `enableCompileCache`): V8's compiled
 * code of every module a command loads, kept on disk between runs, so a
 * start reads code instead of compiling it. Measured (paired whole
 * processes, 2 cores, Node 24; bench/history/README.md, "Start-up"): CPU -5% for a
 * `sync --once` re-sync of 100,000 users, -8% for `status`, -13% for an
 * offline `resolve`, and its first request 30 ms sooner; +1 MB of RSS.
 *
 * Where: `$XDG_CACHE_HOME/user-mirror/compile-cache`, else
 * `~/.cache/user-mirror/compile-cache`: the place an operator looks for a
 * cache that may be deleted at any time, of this account alone, and never
 * beside the mirror, which is data (backed up, sized, watched for its disk;
 * and not known until the configuration is read, after the modules that
 * the cache is for have loaded). Never a shared temp folder: whoever can
 * write the cache decides what code this process runs.
 *
 * So the folder is used only when it is this account's own: the two levels
 * this creates (`user-mirror/` and `compile-cache/`) are created 0700, and
 * found otherwise (not a folder, a symlink, another owner, group- or
 * world-writable) the process runs without a cache, silently (nothing is
 * loaded yet to log with, and a cache is never worth a failed start).
 *
 * Node's own variables decide over this: NODE_COMPILE_CACHE set (Node
 * enabled that folder itself, at its start) is the operator's choice and
 * kept; NODE_DISABLE_COMPILE_CACHE set (to anything: Node's rule) turns
 * the cache off. Read from the process's environment only: this runs
 * before .env is read (src/cli.ts), to cover the modules that read it.
 *
 * Imports only built-ins: the entry point (src/entry.ts) loads this before
 * the Node version is checked.
 */
import nodeModule from 'node:module';
import { lstatSync, mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';

type Env = Record<string, string | undefined>;

/** The cache folder this account would use: undefined when there is no home to put it in. */
export function compileCacheDir(env: Env = process.env, home: () => string = homedir): string | undefined {
  // XDG Base Directory: a relative XDG_CACHE_HOME is invalid and ignored.
  const xdg = env.XDG_CACHE_HOME;
  let base: string;
  if (xdg !== undefined && isAbsolute(xdg)) base = xdg;
  else {
    let h: string;
    try {
      h = home();
    } catch {
      return undefined;
    }
    if (!isAbsolute(h)) return undefined;
    base = join(h, '.cache');
  }
  return join(base, 'user-mirror', 'compile-cache');
}

/**
 * Why `dir` (and the `user-mirror/` folder holding it) is not this
 * account's private cache folder, or undefined when it is. lstat: a symlink
 * is refused, not followed.
 */
export function cacheDirProblem(dir: string, uid: number | undefined = process.getuid?.()): string | undefined {
  for (const d of [dirname(dir), dir]) {
    let s;
    try {
      s = lstatSync(d);
    } catch (err) {
      return `${d}: ${(err as NodeJS.ErrnoException).code ?? 'cannot be read'}`;
    }
    if (s.isSymbolicLink()) return `${d} is a symlink`;
    if (!s.isDirectory()) return `${d} is not a folder`;
    if (uid !== undefined && s.uid !== uid) return `${d} is owned by uid ${s.uid}, not ${uid}`;
    if ((s.mode & 0o022) !== 0) return `${d} is writable by its group or by others (mode ${(s.mode & 0o777).toString(8)})`;
  }
  return undefined;
}

/**
 * Turns the cache on, in this account's folder, unless the operator chose
 * otherwise (above); whether a cache is on. The folder goes into
 * NODE_COMPILE_CACHE, so that the processes this one starts (the `sync`
 * re-exec, the daemon's sync process) start with it, from their first
 * module on.
 */
export function enableOwnCompileCache(env: Env = process.env): boolean {
  if (env.NODE_DISABLE_COMPILE_CACHE !== undefined) return false;
  // Absent before Node 22.1 (refused anyway, after this).
  if (typeof nodeModule.enableCompileCache !== 'function') return false;
  if (nodeModule.getCompileCacheDir() !== undefined) return true;
  if (env.NODE_COMPILE_CACHE !== undefined) return false;
  const dir = compileCacheDir(env);
  if (dir === undefined) return false;
  // Node creates a folder per Node version inside: 0700 too, whatever the umask.
  const umask = process.umask(0o077);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (cacheDirProblem(dir) !== undefined) return false;
    if (nodeModule.enableCompileCache(dir).status !== nodeModule.constants.compileCacheStatus.ENABLED) return false;
  } catch {
    // No home, a read-only one (systemd's ProtectHome): no cache.
    return false;
  } finally {
    process.umask(umask);
  }
  env.NODE_COMPILE_CACHE = dir;
  return true;
}
