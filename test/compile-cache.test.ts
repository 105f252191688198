/**
 * Node's compile cache in this account's own folder (src/runtime/compile-cache.ts):
 * created 0700 under a umask of 022, its files 0600; refused, and the
 * command run without a cache, when the folder is a symlink, another
 * account's, or writable by its group or others; off with
 * NODE_DISABLE_COMPILE_CACHE; the operator's NODE_COMPILE_CACHE kept.
 * The built CLI in a child process, real folders.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cacheDirProblem, compileCacheDir } from '../src/runtime/compile-cache.js';
import { ensureBuilt, ROOT, tempDir, type TempDir } from './support/mirror-fixtures.js';

let dir: TempDir;
let runs = 0;

beforeAll(() => {
  ensureBuilt();
  dir = tempDir('compile-cache-');
});
afterAll(() => dir?.remove());

/** `user-mirror --version` under umask 022 with `env` (and a home of its own): it loads the dispatcher, which the cache then holds. */
async function runVersion(env: Record<string, string>): Promise<void> {
  const home = dir.file(`home-${++runs}`);
  mkdirSync(home);
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(
      '/bin/sh',
      ['-c', 'umask 022; exec "$0" "$@"', process.execPath, join(ROOT, 'dist/cli.js'), '--version'],
      { env: { PATH: process.env.PATH ?? '', HOME: home, ENV_FILE: '/dev/null', ...env } },
      (err, out, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(out)),
    ),
  );
  expect(stdout).toMatch(/^user-mirror /);
}

/** The cache files under `folder` (in Node's per-version folders), or [] when none. */
function cacheFiles(folder: string): string[] {
  if (!existsSync(folder)) return [];
  return readdirSync(folder, { recursive: true, encoding: 'utf8' })
    .map((f) => join(folder, f))
    .filter((f) => lstatSync(f).isFile());
}

const mode = (path: string): number => lstatSync(path).mode & 0o777;

describe('the compile cache folder', () => {
  it('is $XDG_CACHE_HOME/user-mirror/compile-cache, created 0700 and owned by this account under umask 022, its files 0600', async () => {
    const xdg = dir.file('xdg');
    await runVersion({ XDG_CACHE_HOME: xdg });
    const folder = join(xdg, 'user-mirror', 'compile-cache');
    for (const d of [join(xdg, 'user-mirror'), folder]) {
      expect(mode(d), d).toBe(0o700);
      expect(statSync(d).uid, d).toBe(process.getuid?.());
    }
    const files = cacheFiles(folder);
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect(mode(f), f).toBe(0o600);
    for (const versionDir of readdirSync(folder)) expect(mode(join(folder, versionDir)), versionDir).toBe(0o700);
  });

  it('is ~/.cache/user-mirror/compile-cache without XDG_CACHE_HOME, or with a relative one (XDG: ignored)', () => {
    expect(compileCacheDir({}, () => '/home/op')).toBe('/home/op/.cache/user-mirror/compile-cache');
    expect(compileCacheDir({ XDG_CACHE_HOME: 'rel/cache' }, () => '/home/op')).toBe('/home/op/.cache/user-mirror/compile-cache');
    expect(compileCacheDir({ XDG_CACHE_HOME: '/var/cache/op' }, () => '/home/op')).toBe('/var/cache/op/user-mirror/compile-cache');
    expect(compileCacheDir({}, () => '')).toBeUndefined();
  });
});

describe("a folder that is not this account's own is not used", () => {
  it('refuses a group- or world-writable folder, at either level it creates', async () => {
    for (const level of ['user-mirror', 'user-mirror/compile-cache']) {
      const xdg = dir.file(`xdg-writable-${level.replace('/', '-')}`);
      const folder = join(xdg, 'user-mirror', 'compile-cache');
      mkdirSync(folder, { recursive: true, mode: 0o700 });
      chmodSync(join(xdg, level), 0o777);
      expect(cacheDirProblem(folder)).toMatch(/writable by its group or by others/);
      await runVersion({ XDG_CACHE_HOME: xdg });
      expect(cacheFiles(folder), level).toEqual([]);
    }
  });

  it('refuses a symlink, and writes nothing where it points', async () => {
    const xdg = dir.file('xdg-symlink');
    const elsewhere = dir.file('elsewhere');
    mkdirSync(join(xdg, 'user-mirror'), { recursive: true, mode: 0o700 });
    mkdirSync(elsewhere, { mode: 0o700 });
    symlinkSync(elsewhere, join(xdg, 'user-mirror', 'compile-cache'));
    expect(cacheDirProblem(join(xdg, 'user-mirror', 'compile-cache'))).toMatch(/is a symlink/);
    await runVersion({ XDG_CACHE_HOME: xdg });
    expect(cacheFiles(elsewhere)).toEqual([]);
  });

  it("refuses another account's folder", () => {
    const folder = dir.file('owned/user-mirror/compile-cache');
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    const uid = statSync(folder).uid;
    expect(cacheDirProblem(folder, uid)).toBeUndefined();
    expect(cacheDirProblem(folder, uid + 1)).toMatch(new RegExp(`owned by uid ${uid}, not ${uid + 1}`));
  });
});

describe("the operator's choice", () => {
  it('NODE_DISABLE_COMPILE_CACHE turns it off: no folder is created', async () => {
    const xdg = dir.file('xdg-disabled');
    await runVersion({ XDG_CACHE_HOME: xdg, NODE_DISABLE_COMPILE_CACHE: '1' });
    expect(existsSync(xdg)).toBe(false);
  });

  it('NODE_COMPILE_CACHE is kept: the cache goes there, and our folder is not created', async () => {
    const xdg = dir.file('xdg-operator');
    const theirs = dir.file('operator-cache');
    await runVersion({ XDG_CACHE_HOME: xdg, NODE_COMPILE_CACHE: theirs });
    expect(cacheFiles(theirs).length).toBeGreaterThan(0);
    expect(existsSync(xdg)).toBe(false);
  });
});
