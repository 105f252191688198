/**
 * What restores leave behind, as real processes against the stand-in and
 * real files:
 *
 * - A `restore` killed -9 mid-way leaves `mirror.db.restoring-<pid>`:
 *   `status` names it (LEFTOVER, its size, the pid that no longer runs); the
 *   next restore removes it and says so, and keeps the copy of a pid that
 *   runs (never one of a live process).
 * - Replaced files are kept (nothing deletes what an operator may need) and
 *   `status` names them: how many, their bytes, the oldest.
 * - `status` after a restore names it: when, from the backup taken when,
 *   the cursors the replaced file issued that are lost, the history gap.
 * - A second restore, of a copy no `backup` marked (as `sqlite3 .backup` or
 *   `litestream restore` make), taken of a file an earlier restore
 *   installed: `restore` and the `mirror.restored` event give that copy's
 *   time, not the first backup's carried inside it. A second `backup`'s
 *   restore gives its own time.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli, startCli } from './support/cli-process.js';

let standIn: StandIn;
let dir: string;
let mirror: string;
let env: NodeJS.ProcessEnv;
let sleeper: ChildProcess | undefined;

beforeAll(async () => {
  requireBuiltCli('src/commands/backup.js', 'src/commands/restore.js', 'src/commands/status.js');
  standIn = await startStandIn({ port: 0, users: 4_000, seed: 83 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-restore-aftermath-'));
  mirror = join(dir, 'data', 'mirror.db');
  env = {
    PATH: process.env.PATH,
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: mirror,
    MIRROR_DISK_WARN_BYTES: '0',
    REDIS_URL: 'redis://127.0.0.1:1',
    LOG_LEVEL: 'warn',
  };
});

afterAll(async () => {
  sleeper?.kill('SIGKILL');
  await standIn?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

async function cli(args: string[]) {
  return runCli(args, env, 120_000);
}

async function sync(): Promise<void> {
  const r = await cli(['sync', '--once']);
  expect(r.code, r.stderr).toBe(0);
}

function churn(n: number): void {
  for (const u of standIn.directory.page(n * 10, 10)) standIn.directory.update(String(u.user_id));
  standIn.directory.add(2);
}

const leftoversIn = () => readdirSync(join(dir, 'data')).filter((n) => n.includes('.restoring-'));

/** The newest `mirror.restored` event's data. */
function restoredEvent(): { backup_at: string; backup_cursor: number } {
  const db = new Database(mirror, { readonly: true });
  try {
    const body = db
      .prepare<[], string>(`SELECT body FROM change_events WHERE type = 'mirror.restored' ORDER BY id DESC LIMIT 1`)
      .pluck()
      .get();
    return (JSON.parse(body ?? '{}') as { data: { backup_at: string; backup_cursor: number } }).data;
  } finally {
    db.close();
  }
}

describe('after restores', { timeout: 600_000 }, () => {
  const first = () => join(dir, 'first.db');
  let firstBackupAt = '';

  it('status names the restore: when, from which backup, the cursors lost, the history gap', async () => {
    await sync();
    const taken = await cli(['backup', first(), '--json']);
    expect(taken.code, taken.stderr).toBe(0);
    const mark = (JSON.parse(taken.stdout) as { mark: { backupAt: string; backupCursor: number; backupRunId: number } }).mark;
    firstBackupAt = mark.backupAt;
    churn(1);
    await sync();
    const r = await cli(['restore', first(), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const done = JSON.parse(r.stdout) as { restore: { at: string; backupAt: string; replacedCursor: number; cursorBase: number } };
    expect(done.restore.backupAt).toBe(firstBackupAt);
    expect(done.restore.replacedCursor).toBeGreaterThan(mark.backupCursor);

    const status = await cli(['status']);
    expect(status.code, status.stdout).toBe(0);
    expect(status.stdout).toContain(`restored      ${done.restore.at} from the backup taken ${firstBackupAt} (its last published run #1)`);
    expect(status.stdout).toContain(
      `cursors ${mark.backupCursor + 1}–${done.restore.replacedCursor} the replaced file issued are lost (a consumer past ${mark.backupCursor} is told to resume there); new cursors start after ${done.restore.cursorBase}`,
    );
    expect(status.stdout).toContain(`history gap ${firstBackupAt} – the next sync`);
    await sync();
    const later = await cli(['status', '--json']);
    const report = JSON.parse(later.stdout) as { mirror: { restore: { gapTo: string | null; restores: number } } };
    expect(report.mirror.restore.gapTo).not.toBeNull();
    expect(report.mirror.restore.restores).toBe(1);
  });

  it('a second restore of an unmarked copy gives that copy’s time, not the first backup’s carried inside it', async () => {
    churn(2);
    await sync();
    // As `sqlite3 "$MIRROR_DB" ".backup x.db"` or `litestream restore` make it: a consistent copy with no backup row of its own.
    const unmarked = join(dir, 'unmarked.db');
    const live = new Database(mirror, { readonly: true });
    live.prepare('VACUUM INTO ?').run(unmarked);
    const lastPublish = live.prepare<[], string>('SELECT max(published_at) FROM sync_runs').pluck().get() ?? '';
    live.close();
    const r = await cli(['restore', unmarked, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const done = JSON.parse(r.stdout) as { restore: { backupAt: string } };
    expect(done.restore.backupAt).not.toBe(firstBackupAt);
    expect(done.restore.backupAt).toBe(lastPublish);
    expect(restoredEvent().backup_at).toBe(lastPublish);

    // A second `backup`'s restore gives its own time.
    await sync();
    const second = join(dir, 'second.db');
    const taken = await cli(['backup', second, '--json']);
    const mark = (JSON.parse(taken.stdout) as { mark: { backupAt: string } }).mark;
    const again = await cli(['restore', second]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain(`backup taken ${mark.backupAt}`);
    expect(restoredEvent().backup_at).toBe(mark.backupAt);
  });

  it('a restore killed -9 leaves a copy status names; the next restore removes it and says so, and keeps a live pid’s', async () => {
    let leftover: string | undefined;
    for (let attempt = 0; attempt < 8 && leftover === undefined; attempt++) {
      const p = startCli(['restore', first()], env);
      const tmp = `${mirror}.restoring-${p.child.pid}`;
      let ended = false;
      void p.exited(120_000).then(() => (ended = true));
      while (!ended && !existsSync(tmp)) await new Promise((r) => setImmediate(r));
      if (!ended) {
        p.child.kill('SIGKILL');
        await p.exited();
        if (existsSync(tmp)) leftover = tmp;
      }
    }
    expect(leftover, 'a restore killed while its copy exists').toBeDefined();
    const path = leftover ?? '';
    const deadPid = Number(path.slice(path.lastIndexOf('-') + 1));
    // The copy of a process that runs (a restore under way, or a reused pid): never touched.
    sleeper = spawn('sleep', ['600'], { stdio: 'ignore' });
    const liveCopy = `${mirror}.restoring-${sleeper.pid}`;
    writeFileSync(liveCopy, Buffer.alloc(64 * 1024));

    const status = await cli(['status']);
    expect(status.stdout).toMatch(
      new RegExp(
        `LEFTOVER +${literal(path)} \\(.+\\) of restore pid ${deadPid}, which no longer runs \\(killed\\): the next restore removes it`,
      ),
    );
    expect(status.stdout).toContain(`restore copy    ${liveCopy} (64 KB): restore pid ${sleeper.pid} still runs`);

    const r = await cli(['restore', first()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`removed ${literal(path)} \\(.+ MB\\), left by restore pid ${deadPid}, which no longer runs`));
    expect(r.stderr).toContain(`kept ${liveCopy} (0.1 MB): pid ${sleeper.pid} runs (a restore under way, or the pid reused)`);
    expect(leftoversIn()).toEqual([`mirror.db.restoring-${sleeper.pid}`]);
    rmSync(liveCopy);
  });

  it('keeps every replaced file, and status names them: count, bytes, the oldest', async () => {
    const replaced = readdirSync(join(dir, 'data'))
      .filter((n) => /^mirror\.db\.replaced-\d{8}T\d{9}Z$/.test(n))
      .sort();
    // One per restore that replaced a file: at least the three above.
    expect(replaced.length).toBeGreaterThanOrEqual(3);
    const bytes = readdirSync(join(dir, 'data'))
      .filter((n) => n.includes('.replaced-'))
      .reduce((n, f) => n + statSync(join(dir, 'data', f)).size, 0);
    const status = await cli(['status', '--json']);
    const report = JSON.parse(status.stdout) as {
      mirror: { restoreFiles: { replaced: { count: number; bytes: number; oldest: { path: string } } } };
    };
    expect(report.mirror.restoreFiles.replaced).toMatchObject({
      count: replaced.length,
      bytes,
      oldest: { path: join(dir, 'data', replaced[0] ?? '') },
    });
    const text = await cli(['status']);
    expect(text.stdout).toMatch(
      new RegExp(
        `replaced files  ${replaced.length} kept beside the mirror, .+, the oldest from \\S+ \\(.+\\): remove those no longer needed`,
      ),
    );
    // Shown, not judged: a restore is the operator's act.
    expect(text.code, text.stdout).toBe(0);
  });
});

function literal(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
