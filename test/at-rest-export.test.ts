/**
 * Safe at rest, for the files made beside the mirror: exports for a lake
 * (Parquet and NDJSON, full and incremental, `--out` a new folder and
 * EXPORT_DIR's scheduled form) and backups (the scheduled form into
 * BACKUP_DIR, one copy to a new folder), run by the real CLI and by the
 * daemon on its schedules, under an operator's umask (022, and 002): every
 * file and folder they create is the account's own (0600, 0700), or with
 * MIRROR_GROUP the group's where docs/export.md and docs/backup.md say so
 * (the exports' files and the backups 0640, the folders 02750). And a
 * backup killed mid-copy leaves a `.partial-<pid>` (an export its folder
 * `.export-<time>.partial-<pid>`) that the next backup (export) removes,
 * while one whose process runs is left alone.
 */
import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { daemonEnv, runCli, spawnDaemon } from './support/daemon-process.js';
import { startCli } from './support/cli-process.js';

const run = promisify(execFile);

function mode(path: string): number {
  return statSync(path).mode & 0o7777;
}

/** Every file and folder under `dir`, itself included. */
function tree(dir: string): string[] {
  return [
    dir,
    ...readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? tree(join(dir, d.name)) : [join(dir, d.name)])),
  ];
}

/** Each path under `root` (itself included) with its mode, for one comparison that names every wrong one. */
function modes(root: string): Array<[string, string]> {
  return tree(root).map((p) => [p.slice(root.length) || '/', `0${mode(p).toString(8)}`]);
}

/** What `modes(root)` must be when every folder is `dirMode` and every file `fileMode`. */
function expected(root: string, dirMode: number, fileMode: (path: string) => number = () => 0o600): Array<[string, string]> {
  return tree(root).map((p) => [p.slice(root.length) || '/', `0${(statSync(p).isDirectory() ? dirMode : fileMode(p)).toString(8)}`]);
}

let dir: string;
let redis: TestRedis;
let standIn: StandIn;
let mirrorDb: string;
const savedUmask = process.umask(0o022);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-at-rest-export-'));
  // An app folder as operators have it, open to every account: only the modes of what the project makes protect it.
  chmodSync(dir, 0o755);
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 120, seed: 31 });
  mirrorDb = join(dir, 'data', 'mirror.db');
  const sync = await runCli(['sync', '--once'], envFor());
  expect(sync.code, sync.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  process.umask(savedUmask);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function envFor(extra: Record<string, string> = {}): Record<string, string> {
  return daemonEnv({ redisUrl: redis.url, standIn, mirrorDb, queuePrefix: 'at-rest-export', statusPort: 0, cron: '0 0 1 1 *', extra });
}

async function cli(args: string[], extra: Record<string, string> = {}): Promise<string> {
  const res = await runCli(args, envFor(extra), 120_000);
  expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(0);
  return res.stderr;
}

// First: the daemon makes the audit, which the backups after it copy too.
describe('the daemon on its schedules, under umask 022', () => {
  beforeAll(() => {
    process.umask(0o022);
  });

  it('a scheduled export and a scheduled backup into new folders are private', async () => {
    const exportDir = join(dir, 'daemon', 'lake');
    const backupDir = join(dir, 'daemon', 'backups');
    const daemon = spawnDaemon(
      envFor({
        ALLOW_VOLATILE_REDIS: '1',
        EXPORT_DIR: exportDir,
        EXPORT_CRON: '*/2 * * * * *',
        BACKUP_DIR: backupDir,
        BACKUP_CRON: '*/2 * * * * *',
      }),
    );
    try {
      await daemon.ready;
      await daemon.waitForLog((l) => l.event === 'export.done', 120_000, 'a scheduled export');
      await daemon.waitForLog((l) => l.event === 'backup.done', 120_000, 'a scheduled backup');
    } finally {
      await daemon.stop('SIGTERM');
    }
    const root = join(dir, 'daemon');
    expect(readdirSync(exportDir)).toContain('last-export.json');
    expect(readdirSync(backupDir)).toContain('last-backup.json');
    expect(readdirSync(backupDir).some((n) => /^audit-.*\.db$/.test(n))).toBe(true);
    expect(modes(root)).toEqual(expected(root, 0o700));
  }, 300_000);
});

for (const umask of [0o022, 0o002]) {
  describe(`under umask ${umask.toString(8).padStart(3, '0')}`, () => {
    const tag = `u${umask.toString(8)}`;
    beforeAll(() => {
      process.umask(umask);
    });

    it('exports: Parquet and NDJSON, full and incremental, to a new --out folder and to EXPORT_DIR, all private', async () => {
      const lake = join(dir, tag, 'lake');
      const out = join(lake, 'parquet', 'nested');
      await cli(['export', '--out', out]);
      await cli(['export', '--out', out, '--incremental']);
      await cli(['export', '--out', join(lake, 'ndjson'), '--format', 'ndjson']);
      await cli(['export', '--out', join(lake, 'ndjson'), '--format', 'ndjson', '--incremental']);
      // EXPORT_DIR alone: the scheduled form (incremental, rotation, last-export.json), run twice.
      const exportDir = join(lake, 'scheduled');
      await cli(['export'], { EXPORT_DIR: exportDir });
      await cli(['export', '--json'], { EXPORT_DIR: exportDir });

      const names = tree(lake).map((p) => p.slice(lake.length));
      expect(names.filter((n) => /\/export-[^/]+\/manifest\.json$/.test(n))).toHaveLength(6);
      expect(names.some((n) => n.endsWith('users.parquet'))).toBe(true);
      expect(names.some((n) => n.endsWith('users.ndjson'))).toBe(true);
      expect(names).toContain('/scheduled/last-export.json');
      expect(modes(lake)).toEqual(expected(lake, 0o700));
    }, 300_000);

    it('backups: the scheduled form into a new BACKUP_DIR and one copy into a new folder, all private', async () => {
      const backups = join(dir, tag, 'backups', 'nested');
      await cli(['backup'], { BACKUP_DIR: backups });
      await cli(['backup'], { BACKUP_DIR: backups });
      const one = join(dir, tag, 'one', 'deeper');
      await cli(['backup', join(one, 'copy.db')]);
      await cli(['backup', join(one, 'audit-copy.db'), '--audit']);

      expect(readdirSync(backups).filter((n) => /^(mirror|audit)-.*\.db$/.test(n))).toHaveLength(4);
      expect(readdirSync(backups)).toContain('last-backup.json');
      expect(readdirSync(one).sort()).toEqual(['audit-copy.db', 'copy.db']);
      for (const root of [join(dir, tag, 'backups'), join(dir, tag, 'one')]) expect(modes(root)).toEqual(expected(root, 0o700));
    }, 300_000);
  });
}

describe('MIRROR_GROUP, under umask 022', () => {
  const group = `umx${process.pid % 100_000}`;
  let gid: number;

  beforeAll(async () => {
    process.umask(0o022);
    await run('groupadd', [group]);
    gid = Number((await run('getent', ['group', group])).stdout.split(':')[2]);
  });
  afterAll(async () => {
    await run('groupdel', [group]).catch(() => undefined);
  });

  it("exports and backups are the group's (0640 in 02750 folders) where documented, never other accounts'", async () => {
    const root = join(dir, 'group');
    const extra = { MIRROR_GROUP: group, EXPORT_DIR: join(root, 'lake'), BACKUP_DIR: join(root, 'backups') };
    await cli(['export', '--out', join(root, 'out', 'new')], extra);
    await cli(['export', '--format', 'ndjson', '--out', join(root, 'ndjson')], extra);
    await cli(['export'], extra);
    await cli(['backup'], extra);
    await cli(['backup', join(root, 'one', 'copy.db')], extra);

    // The attempts' records (last-export.json, last-backup.json) hold no user data and no doc gives them to the group.
    const record = (p: string) => /last-(export|backup)\.json$/.test(p);
    expect(modes(root).filter(([p]) => p !== '/')).toEqual(expected(root, 0o2750, (p) => (record(p) ? 0o600 : 0o640)).slice(1));
    for (const path of tree(root).slice(1)) expect([path, statSync(path).gid]).toEqual([path, gid]);
    expect(tree(root).filter((p) => p.endsWith('.parquet') || p.endsWith('.ndjson') || p.endsWith('.db')).length).toBeGreaterThan(8);
  }, 300_000);
});

describe('restore from a backup readable by others, under umask 022', () => {
  beforeAll(() => {
    process.umask(0o022);
  });

  it('never makes the copy it checks beside the mirror, nor the restored mirror, readable by others', async () => {
    const data = join(dir, 'restore', 'data');
    const target = join(data, 'mirror.db');
    await cli(['backup', target]);
    // As `sqlite3 "$MIRROR_DB" ".backup x.db"` (docs/backup.md) makes it under umask 022.
    const wide = join(dir, 'restore', 'wide-backup.db');
    await cli(['backup', wide]);
    chmodSync(wide, 0o644);

    // The copy lives for the milliseconds of its copy and check: its mode is read as often as the loop turns.
    const seen = new Map<string, number>();
    for (let attempt = 0; attempt < 5 && seen.size === 0; attempt++) {
      const child = startCli(['restore', wide], envFor({ MIRROR_DB: target }));
      while (child.child.exitCode === null) {
        for (const name of readdirSync(data).filter((n) => n.includes('.restoring-'))) {
          try {
            seen.set(`${name} ${attempt}`, (seen.get(`${name} ${attempt}`) ?? 0) | mode(join(data, name)));
          } catch {
            // Renamed or removed between the listing and the stat.
          }
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      expect(await child.exited(60_000), child.stderr()).toBe(0);
    }
    expect(seen.size, 'the copy beside the mirror was never seen in 5 restores').toBeGreaterThan(0);
    for (const [name, bits] of seen) expect([name, `0${bits.toString(8)}`]).toEqual([name, '0600']);
    expect(modes(data)).toEqual(expected(data, 0o700));
  }, 300_000);
});

describe('a backup or an export killed mid-write', () => {
  beforeAll(() => {
    process.umask(0o022);
  });

  /** A process that runs until killed, and its pid. */
  function sleeper(): { pid: number; kill9(): Promise<void>; stop(): void } {
    const child = spawn('sleep', ['600'], { stdio: 'ignore' });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return {
      pid: child.pid as number,
      async kill9() {
        child.kill('SIGKILL');
        await exited;
      },
      stop: () => child.kill('SIGKILL'),
    };
  }

  /**
   * Runs the CLI with `args` and kills it with SIGKILL as soon as a name matching `partial` appears in `folder`;
   * up to 5 attempts. Returns the name it left, or undefined when no attempt was caught before it finished.
   */
  async function killedMidWrite(args: string[], env: Record<string, string>, folder: string, partial: RegExp): Promise<string | undefined> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const child = startCli(args, env);
      let found: string | undefined;
      const deadline = Date.now() + 60_000;
      while (child.child.exitCode === null && Date.now() < deadline) {
        found = readdirSync(folder).find((n) => partial.test(n));
        if (found !== undefined) {
          child.child.kill('SIGKILL');
          break;
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      await child.exited(60_000);
      if (found !== undefined && readdirSync(folder).includes(found)) return found;
    }
    return undefined;
  }

  it("leaves its .partial-<pid> (and SQLite's -journal of it), which the next backup removes; a running one's is kept", async () => {
    const backups = join(dir, 'killed');
    await cli(['backup'], { BACKUP_DIR: backups });
    // The kill window of a real backup of this mirror is milliseconds: the partials are planted, named by the pid of
    // a process killed with SIGKILL (dead) and of one still running (a backup in progress).
    const killed = sleeper();
    const running = sleeper();
    try {
      const dead = [`mirror-20261128T051500123Z.db.partial-${killed.pid}`, `mirror-20261128T051500123Z.db.partial-${killed.pid}-journal`];
      const live = `mirror-20261128T061500123Z.db.partial-${running.pid}`;
      for (const name of [...dead, live]) writeFileSync(join(backups, name), 'SQLite format 3\0', { mode: 0o600 });
      await killed.kill9();

      const stderr = await cli(['backup'], { BACKUP_DIR: backups });
      const left = readdirSync(backups);
      for (const name of dead) expect(left).not.toContain(name);
      expect(left).toContain(live);
      for (const name of dead) expect(stderr).toContain(`removed ${join(backups, name)}`);
      expect(left.filter((n) => /^mirror-.*\.db$/.test(n))).toHaveLength(2);
    } finally {
      running.stop();
      killed.stop();
    }
  }, 300_000);

  it('the next backup removes the partial of a backup child killed with SIGKILL', async (ctx) => {
    // A real kill of `backup` as the daemon runs it: killed as soon as its partial copy appears (here the first
    // attempt has caught it every time). On a host fast enough to rename the copy before the kill lands, the test is
    // reported skipped, by name, and the planted partials above still cover the removal.
    const backups = join(dir, 'killed-live');
    mkdirSync(backups, { mode: 0o700 });
    const partial = await killedMidWrite(['backup'], envFor({ BACKUP_DIR: backups }), backups, /\.partial-\d+$/);
    if (partial === undefined) return ctx.skip('a backup child was never caught mid-copy in 5 attempts');
    const stderr = await cli(['backup'], { BACKUP_DIR: backups });
    expect(stderr).toContain(`removed ${join(backups, partial)}`);
    expect(readdirSync(backups).filter((n) => n.includes('.partial-'))).toEqual([]);
  }, 600_000);

  it("an export's folder left by a killed export is removed by the next export; a running one's is kept", async () => {
    const out = join(dir, 'lake-killed');
    await cli(['export', '--out', out]);
    const killed = sleeper();
    const running = sleeper();
    try {
      const dead = `.export-2026-11-28T05-15-00-123Z.partial-${killed.pid}`;
      const live = `.export-2026-11-28T06-15-00-123Z.partial-${running.pid}`;
      for (const name of [dead, live]) {
        mkdirSync(join(out, name), { mode: 0o700 });
        writeFileSync(join(out, name, '.users.parquet.tmp-1'), 'PAR1', { mode: 0o600 });
      }
      await killed.kill9();
      const stderr = await cli(['export', '--out', out, '--incremental']);
      const left = readdirSync(out);
      expect(left).not.toContain(dead);
      expect(left).toContain(live);
      expect(stderr).toContain(`removed ${join(out, dead)}: left by an export that did not finish`);
      expect(left.filter((n) => n.startsWith('export-'))).toHaveLength(2);
    } finally {
      running.stop();
      killed.stop();
    }
  }, 300_000);

  it('the next export removes the folder of an export killed with SIGKILL', async (ctx) => {
    // As the backup's above: killed as soon as its hidden folder appears; reported skipped, by name, if never caught.
    const out = join(dir, 'lake-killed-live');
    mkdirSync(out, { mode: 0o700 });
    const partial = await killedMidWrite(['export', '--out', out], envFor(), out, /^\.export-.*\.partial-\d+$/);
    if (partial === undefined) return ctx.skip('an export child was never caught mid-write in 5 attempts');
    const stderr = await cli(['export', '--out', out]);
    expect(stderr).toContain(`removed ${join(out, partial)}`);
    expect(readdirSync(out).filter((n) => n.includes('.partial-'))).toEqual([]);
  }, 600_000);
});
