/**
 * The sync across process boundaries: a reader in another process while a
 * run publishes, a `sync --once` child killed with SIGKILL mid-run, and the
 * command's exit codes. Needs `npm run build` first (`npm test` does it).
 */
import { spawn } from 'node:child_process';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openMirror } from '../db/open.js';
import { requireBuiltCli, runCli, startCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { createSyncRig, directoryView, listPagesServed, mirrorFingerprint, mirrorView, runRow, type SyncRig } from './support/sync-rig.js';

beforeAll(() => requireBuiltCli('src/commands/sync.js'));

let rig: SyncRig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

/**
 * The child reader: loops over the active users in one statement (one
 * snapshot) and prints each fingerprint it sees that differs from the
 * previous one, the same digest as mirrorFingerprint. Stops on stdin EOF.
 */
const READER = `
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
const db = new Database(process.argv[1], { readonly: true, fileMustExist: true });
db.pragma('busy_timeout = 5000');
const rows = db.prepare('SELECT user_id, content_hash FROM users WHERE deleted_at IS NULL ORDER BY user_id');
let stop = false;
process.stdin.on('end', () => { stop = true; }).resume();
let last = '';
let reads = 0;
while (!stop) {
  const hash = createHash('sha256');
  let count = 0;
  for (const r of rows.iterate()) { hash.update(r.user_id + ':' + r.content_hash + '\\n'); count++; }
  reads++;
  const seen = JSON.stringify({ count, digest: hash.digest('hex') });
  if (seen !== last) { process.stdout.write(seen + '\\n'); last = seen; }
  await new Promise((resolve) => setImmediate(resolve));
}
process.stdout.write(JSON.stringify({ reads }) + '\\n');
`;

describe('a reader in another process', () => {
  it('only ever sees the previous complete mirror or the new one', async () => {
    const r = (rig = await createSyncRig({ users: 10_000, seed: 3 }));
    await r.sync();
    const before = mirrorFingerprint(r.db);
    const ids = [...directoryView(r.standIn).keys()];
    for (const id of ids.slice(0, 1_500)) r.standIn.directory.update(id);
    r.standIn.directory.delete(ids.slice(5_000, 5_500));
    r.standIn.directory.add(1_000);

    const reader = spawn(process.execPath, ['--input-type=module', '-e', READER, r.dbPath], {
      cwd: process.cwd(),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    reader.stdout.on('data', (d: Buffer) => (out += d.toString()));
    reader.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => reader.once('exit', resolve));
    await eventually(
      () => out.includes('\n'),
      30_000,
      () => `the reader's first line (stderr: ${err})`,
      10,
    );

    const summary = await r.sync();
    expect(summary).toMatchObject({ status: 'succeeded', updated: 1_500, deleted: 500, created: 1_000 });
    const after = mirrorFingerprint(r.db);
    // Until the reader has read the new mirror whole: on a busy machine one read of 10,000 rows takes far more than a moment.
    await eventually(
      () => out.includes(`${JSON.stringify(after)}\n`),
      30_000,
      () => `the reader to see the new mirror (stdout: ${out.slice(-500)}, stderr: ${err})`,
      10,
    );
    reader.stdin.end();
    expect(await exited, err).toBe(0);

    const lines = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { count?: number; digest?: string; reads?: number });
    const reads = lines.at(-1)?.reads ?? 0;
    const seen = lines.slice(0, -1);
    expect(reads).toBeGreaterThan(5);
    expect(seen).toEqual([before, after]);
  });
});

describe('sync --once killed with SIGKILL mid-run', () => {
  it('leaves the previous snapshot intact and a sound file; the next run succeeds', async () => {
    const r = (rig = await createSyncRig({ users: 10_000, seed: 4 }));
    await r.sync();
    const before = mirrorFingerprint(r.db);
    const ids = [...directoryView(r.standIn).keys()];
    for (const id of ids.slice(0, 500)) r.standIn.directory.update(id);
    r.standIn.directory.delete(ids.slice(1_000, 1_100));
    r.standIn.directory.add(300);
    r.standIn.faults.set({ latencyMs: 40 });

    const served = listPagesServed(r.standIn);
    const child = startCli(['sync', '--once', '--concurrency', '2'], r.env());
    await eventually(
      () => listPagesServed(r.standIn) >= served + 8,
      20_000,
      () => `the child to make progress\n${child.stdout()}\n${child.stderr()}`,
      10,
    );
    child.child.kill('SIGKILL');
    await child.exited();
    expect(child.child.signalCode).toBe('SIGKILL');

    const check = openMirror(r.dbPath);
    try {
      expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(mirrorFingerprint(check)).toEqual(before);
      const killed = check.prepare<[], { id: number; status: string }>('SELECT id, status FROM sync_runs ORDER BY id DESC LIMIT 1').get();
      expect(killed?.status).toBe('running');

      r.standIn.faults.set({ latencyMs: 0 });
      const next = await r.sync();
      expect(next).toMatchObject({ status: 'succeeded', updated: 500, deleted: 100, created: 300 });
      expect(runRow(r.db, killed?.id ?? -1)).toMatchObject({ status: 'failed', error: 'interrupted' });
      expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
    } finally {
      check.close();
    }
  });
});

describe('user-mirror sync --once', () => {
  it('exits 0 after a successful run, with JSON log lines when not on a terminal', async () => {
    const r = (rig = await createSyncRig({ users: 1_200 }));
    const res = await runCli(['sync', '--once'], r.env());
    expect(res.code, res.stderr).toBe(0);
    const events = res.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event?: string; status?: string; usersSeen?: number });
    expect(events.find((e) => e.event === 'sync.finished')).toMatchObject({ status: 'succeeded', usersSeen: 1_200 });
    expect(events.some((e) => e.event === 'sync.progress')).toBe(true);
    expect(mirrorView(r.db)).toEqual(directoryView(r.standIn));
  });

  it('exits 4 on a partial run and says why', async () => {
    const r = (rig = await createSyncRig({ users: 1_000 }));
    await r.sync();
    r.standIn.directory.delete([...directoryView(r.standIn).keys()].slice(0, 50));
    const res = await runCli(['sync', '--once'], r.env({ SYNC_MAX_DELETE_RATIO: '0.01' }));
    expect(res.code, res.stderr).toBe(4);
    expect(res.stdout).toMatch(/"status":"partial"/);
    expect(res.stdout).toMatch(/SYNC_MAX_DELETE_RATIO/);
  });

  it('exits 1 when the service is down, and the mirror is untouched', async () => {
    const r = (rig = await createSyncRig({ users: 600 }));
    await r.sync();
    const before = mirrorFingerprint(r.db);
    r.standIn.faults.set({ rate503: 1, retryAfter: 0 });
    // A retry budget short enough to give up within the test.
    const res = await runCli(['sync', '--once'], r.env({ SYNC_PAGE_ATTEMPTS: '2', SYNC_PAGE_RETRY_BUDGET_MS: '500' }));
    expect(res.code, res.stderr).toBe(1);
    expect(res.stdout).toMatch(/"status":"failed"/);
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });

  it('exits 2 naming every missing variable, and without --once', async () => {
    const missing = await runCli(['sync', '--once'], { PATH: process.env.PATH });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/SERVICE_BASE_URL: is required/);
    expect(missing.stderr).toMatch(/SERVICE_API_KEY: is required/);

    const noOnce = await runCli(['sync'], { PATH: process.env.PATH });
    expect(noOnce.code).toBe(2);
    expect(noOnce.stderr).toMatch(/--once/);
  });
});
