/**
 * The mirror as a system of record: `user-mirror backup` and `restore` as
 * real processes against the stand-in and real files.
 *
 * - A backup taken while a sync runs restores to a mirror whose `resolve
 *   --as-of` answers (every user, at several past times) and `history`
 *   equal the original's; the copy is 0600 under umask 022.
 * - The feed across a restore: no cursor or event id is issued twice for
 *   different events; a consumer behind the backup reads on into a
 *   `mirror.restored` event; one past it is told (exit 1, the restore
 *   named, where to resume); as-of in the gap is "unknown" (exit 2).
 * - docs/backup.md's one-copy recipe as written (into this test's folder
 *   instead of /srv/backups): `backup <file>` and `backup <file> --audit`.
 * - Refusals: a held mirror (exit 5), not SQLite, not a mirror, a newer
 *   schema, a file that fails its check (exit 1), each leaving the mirror
 *   as it was; and every command refuses a mirror newer than its schema.
 */
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HistoryReader } from '../db/history-reader.js';
import { openMirror } from '../db/open.js';
import { openAudit } from '../db/open-audit.js';
import { MIGRATIONS } from '../db/migrations.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli, startCli } from './support/cli-process.js';

let standIn: StandIn;
let dir: string;
let mirror: string;
let env: NodeJS.ProcessEnv;

const LATEST = Math.max(...MIGRATIONS.map((m) => m.version));
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function cli(args: string[], extra: NodeJS.ProcessEnv = {}) {
  return runCli(args, { ...env, ...extra }, 120_000);
}

async function sync(): Promise<void> {
  const r = await cli(['sync', '--once']);
  expect(r.code, r.stderr).toBe(0);
}

/** Updates, source changes, a deletion and an addition: a round of churn. */
function churn(round: number): void {
  const records = [...standIn.directory.records()];
  for (let i = 0; i < 6; i++)
    standIn.directory.update(String(records[round * 7 + i]?.user_id), i % 2 === 0 ? 'fallback_time_zone' : 'connected_sources');
  standIn.directory.delete([String(records[round * 7 + 6]?.user_id)]);
  standIn.directory.add(1);
}

/** Every client id the stand-in ever listed, and each one's as-of answer at `at`, read from `path`. */
function answersAt(path: string, clients: readonly string[], at: string): Map<string, string> {
  const db = openMirror(path, { readonly: true });
  try {
    const reader = new HistoryReader(db);
    return new Map(clients.map((c) => [c, JSON.stringify(reader.asOf(c, at))]));
  } finally {
    db.close();
  }
}

function historyOf(path: string, client: string): string {
  const db = openMirror(path, { readonly: true });
  try {
    return JSON.stringify(new HistoryReader(db).of(client));
  } finally {
    db.close();
  }
}

function eventsOf(path: string): Array<{ cursor: number; id: string; type: string }> {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare<[], { cursor: number; body: string; type: string }>(`SELECT id AS cursor, body, type FROM change_events ORDER BY id`)
      .all()
      .map((r) => ({ cursor: r.cursor, type: r.type, id: (JSON.parse(r.body) as { id: string }).id }));
  } finally {
    db.close();
  }
}

beforeAll(async () => {
  requireBuiltCli('src/commands/backup.js', 'src/commands/restore.js');
  standIn = await startStandIn({ seed: 39, users: 2_000, orgs: 0, membersPerOrg: 0 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-backup-'));
  mirror = join(dir, 'data', 'mirror.db');
  env = {
    PATH: process.env.PATH,
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: mirror,
    LOG_LEVEL: 'warn',
  };
});

afterAll(async () => {
  await standIn?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe('backup and restore', { timeout: 600_000 }, () => {
  const clients: string[] = [];
  const moments: string[] = [];
  const original = new Map<string, Map<string, string>>();
  const backup = () => join(dir, 'during-sync.db');
  let backupCursor = 0;
  let lostEvents: Array<{ cursor: number; id: string; type: string }> = [];

  it('takes a checked, private copy while a sync runs', async () => {
    await sync();
    for (let round = 0; round < 3; round++) {
      churn(round);
      await sync();
      await wait(5);
      moments.push(new Date().toISOString());
      await wait(5);
    }
    // What history answers now, before the sync the backup will overlap: the restored mirror must answer the same.
    for (const r of standIn.directory.records()) clients.push(String(r.client_user_id));
    for (const at of moments) original.set(at, answersAt(mirror, clients, at));
    // A slow sync with churn; the backup runs while it holds the mirror's write lock.
    churn(3);
    standIn.faults.set({ latencyMs: 150 });
    const slow = startCli(['sync', '--once'], { ...env, SYNC_CONCURRENCY: '1' });
    await wait(400);
    const taken = await runCli(['backup', backup(), '--json'], env, 120_000);
    expect(taken.code, taken.stderr).toBe(0);
    expect(await slow.exited(120_000), slow.stderr()).toBe(0);
    standIn.faults.set({ latencyMs: 0 });

    const facts = JSON.parse(taken.stdout) as { bytes: number; schemaVersion: number; mark: { backupRunId: number; backupCursor: number } };
    expect(facts.schemaVersion).toBe(LATEST);
    expect(facts.bytes).toBe(statSync(backup()).size);
    // The copy holds the runs published before the slow one: it was taken during it, not after.
    expect(facts.mark.backupRunId).toBe(4);
    backupCursor = facts.mark.backupCursor;
    expect(statSync(backup()).mode & 0o777).toBe(0o600);
    const copy = new Database(backup(), { readonly: true });
    expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
    // The run in progress is not in the copy as running (its row commits with its publish, or it is marked failed).
    expect(copy.prepare(`SELECT count(*) FROM sync_runs WHERE status = 'running'`).pluck().get()).toBe(0);
    copy.close();
    expect(readdirSync(dir).filter((n) => n.includes('.partial-'))).toEqual([]);
  }, 300_000);

  it('is 0600 under umask 022 as a separate process writes it', async () => {
    const dest = join(dir, 'umask.db');
    const r = await runCli(['backup', dest], { ...env, NODE_OPTIONS: '' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/schema version \d+/);
    expect(r.stdout).toMatch(/active users: \d+/);
    expect(statSync(dest).mode & 0o777).toBe(0o600);
    // The audit too, as docs/backup.md's recipe does.
    openAudit(join(dir, 'data', 'mirror-audit.db')).close();
    const audit = join(dir, 'audit.db');
    const auditRun = await runCli(['backup', audit, '--audit'], env);
    expect(auditRun.code, auditRun.stderr).toBe(0);
    expect(auditRun.stdout).toMatch(/^audit backup: /);
    expect(statSync(audit).mode & 0o777).toBe(0o600);
    const again = await runCli(['backup', dest], env);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/exists: a backup never overwrites/);
  });

  it('refuses while a process holds the mirror, and names it', async () => {
    const holder = startCli(['changes', '--follow'], env);
    await wait(1_500);
    const r = await cli(['restore', backup()]);
    holder.child.kill('SIGTERM');
    await holder.exited();
    expect(r.code).toBe(5);
    expect(r.stderr).toMatch(/is open in pid \d+ .*changes --follow.*stop the daemon.*pm2 stop user-mirror/);
  });

  it('refuses what is not a good mirror, leaving the mirror as it was', async () => {
    const before = readFileSync(mirror);
    const text = join(dir, 'not-sqlite.db');
    writeFileSync(text, 'hello, this is not a database at all '.repeat(200));
    const other = join(dir, 'other.db');
    new Database(other).exec('CREATE TABLE t (x)').close();
    const newer = join(dir, 'newer.db');
    writeFileSync(newer, readFileSync(backup()));
    const n = new Database(newer);
    n.pragma(`user_version = ${LATEST + 1}`);
    n.close();
    const damaged = join(dir, 'damaged.db');
    const bytes = readFileSync(backup());
    // Scribble over pages in the middle of the file (not the header): the check must catch it.
    bytes.fill(0x5a, Math.floor(bytes.length / 2), Math.floor(bytes.length / 2) + 64 * 1024);
    writeFileSync(damaged, bytes);
    const cases: Array<[string, RegExp]> = [
      [text, /not a SQLite database/],
      [other, /not a user-mirror mirror \(no users/],
      [newer, new RegExp(`schema version ${LATEST + 1} is newer than this build's ${LATEST}`)],
      [damaged, /fails its check|cannot be checked|malformed/],
    ];
    for (const [file, why] of cases) {
      const r = await cli(['restore', file]);
      expect(r.code, `${file}: ${r.stderr}`).toBe(1);
      expect(r.stderr).toMatch(why);
    }
    expect(readFileSync(mirror).equals(before)).toBe(true);
    expect(readdirSync(join(dir, 'data')).filter((n) => n.includes('.restoring-') || n.includes('.replaced-'))).toEqual([]);
  });

  it('restores: as-of and history answer as the original did; the replaced file is kept aside', async () => {
    // More churn and a sync after the backup: the events the lost file issues past the backup's cursor.
    churn(5);
    await sync();
    lostEvents = eventsOf(mirror).filter((e) => e.cursor > backupCursor);
    expect(lostEvents.length).toBeGreaterThan(0);
    const lostHistory = historyOf(mirror, clients[0] ?? '');

    const r = await cli(['restore', backup(), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const done = JSON.parse(r.stdout) as { replacedKeptAs: string; restore: { backupCursor: number; cursorBase: number } };
    expect(done.restore.backupCursor).toBe(backupCursor);
    expect(existsSync(done.replacedKeptAs)).toBe(true);
    expect(statSync(mirror).mode & 0o777).toBe(0o600);
    for (const at of moments) expect(answersAt(mirror, clients, at)).toEqual(original.get(at));
    // History: every user's versions and connections as the backup holds them (nothing lost, nothing invented).
    for (const c of clients.slice(0, 50)) expect(historyOf(mirror, c)).toEqual(historyOf(backup(), c));
    expect(lostHistory).not.toBe('');

    const someone = clients[3] ?? '';
    const cliAnswer = await cli(['resolve', someone, '--as-of', moments[1] ?? '', '--json']);
    const asOf = JSON.parse(original.get(moments[1] ?? '')?.get(someone) ?? '{}') as { kind: string };
    expect(cliAnswer.code).toBe(asOf.kind === 'found' ? 0 : 3);
  });

  it('never issues a cursor or an event id twice, and tells each consumer what happened', async () => {
    churn(6);
    await sync();
    const after = eventsOf(mirror);
    const fresh = after.filter((e) => e.cursor > backupCursor);
    expect(fresh[0]?.type).toBe('mirror.restored');
    const lostCursors = new Set(lostEvents.map((e) => e.cursor));
    const lostIds = new Set(lostEvents.map((e) => e.id));
    expect(fresh.filter((e) => lostCursors.has(e.cursor) || lostIds.has(e.id))).toEqual([]);
    expect(fresh.length).toBeGreaterThan(1);

    // A consumer behind the backup reads on, through the marker, into what was published since.
    const behind = await cli(['changes', '--after', String(backupCursor - 1), '--json']);
    expect(behind.code, behind.stderr).toBe(0);
    const types = behind.stdout
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { type: string }).type);
    expect(types[1]).toBe('mirror.restored');
    expect(types.length).toBe(fresh.length + 1);

    // A consumer that read the lost file's events is told, not skipped or replayed.
    const ahead = await cli(['changes', '--after', String(lostEvents.at(-1)?.cursor ?? 0)]);
    expect(ahead.code).toBe(1);
    expect(ahead.stderr).toMatch(new RegExp(`restored at .* whose feed ends at cursor ${backupCursor}.*--after ${backupCursor}`));
  });

  it('answers as-of in the restore gap as unknown, naming the restore', async () => {
    const db = openMirror(mirror, { readonly: true });
    const gap = new HistoryReader(db).gaps()[0];
    db.close();
    expect(gap?.to).not.toBeNull();
    const inGap = new Date((Date.parse(gap?.from ?? '') + Date.parse(gap?.to ?? '')) / 2).toISOString();
    const r = await cli(['resolve', clients[0] ?? '', '--as-of', inGap]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/the mirror was restored at .* from a backup taken .* is not known/);
  });

  it('every command refuses a mirror newer than its schema, naming both versions', async () => {
    const newer = join(dir, 'newer-mirror', 'mirror.db');
    const made = await runCli(['backup', join(dir, 'to-bump.db')], env);
    expect(made.code).toBe(0);
    rmSync(join(dir, 'newer-mirror'), { recursive: true, force: true });
    const r = await runCli(['restore', join(dir, 'to-bump.db')], { ...env, MIRROR_DB: newer });
    expect(r.code, r.stderr).toBe(0);
    const db = new Database(newer);
    db.pragma(`user_version = ${LATEST + 1}`);
    db.close();
    chmodSync(newer, 0o600);
    const line = new RegExp(`MIRROR_DB=.*schema version ${LATEST + 1} is newer than this build's ${LATEST}`);
    for (const args of [['sync', '--once'], ['status'], ['resolve', clients[0] ?? 'x'], ['changes'], ['history', clients[0] ?? 'x']]) {
      const out = await runCli(args, { ...env, MIRROR_DB: newer });
      expect(out.code, `${args.join(' ')}: ${out.stdout}${out.stderr}`).toBe(2);
      expect(out.stdout + out.stderr, args.join(' ')).toMatch(line);
    }
  });
});
