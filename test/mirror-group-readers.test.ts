/**
 * Readers in MIRROR_GROUP, as another account (a real uid and gid through
 * `setpriv`) with the commands docs/sql.md gives: `sqlite3 -readonly` and
 * Python's `mode=ro`, with no daemon running (the last writer, `sync
 * --once`, has exited). And MIRROR_GROUP set on a mirror made without it:
 * the next writable open gives the files and the folder to the group (one
 * structured line), never to other accounts. And after `restore`, before
 * any sync: the restore leaves the pair a reader needs, with the group.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';

/** An account and a group no file here belongs to. */
const READER_UID = 65534;
const GROUP_GID = 46_123;

const hasSqlite3 = spawnSync('sqlite3', ['-version']).status === 0;
const canSetpriv =
  spawnSync('setpriv', ['--reuid', String(READER_UID), '--regid', String(GROUP_GID), '--clear-groups', 'true']).status === 0;
/** The system's Python, which the reader account may run (a pyenv shim under /root is not). */
const PYTHON = '/usr/bin/python3';
const hasPython = canSetpriv && asReader([PYTHON, '-c', 'import sqlite3']).status === 0;

let base: string;
let standIn: StandIn;

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), 'user-mirror-group-'));
  // The reader must reach the mirror's folder: the test's own folder is open to traverse, nothing more.
  chmodSync(base, 0o711);
  standIn = await startStandIn({ port: 0, users: 300, seed: 63 });
});
afterAll(async () => {
  await standIn?.close();
  rmSync(base, { recursive: true, force: true });
});

function syncEnv(mirrorDb: string, group?: string): Record<string, string> {
  return {
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: mirrorDb,
    ...(group === undefined ? {} : { MIRROR_GROUP: group }),
  };
}

/** Runs `command` as the reader: uid 65534, the group only. */
function asReader(command: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('setpriv', ['--reuid', String(READER_UID), '--regid', String(GROUP_GID), '--clear-groups', ...command], {
    encoding: 'utf8',
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const count = (db: string) => asReader(['sqlite3', '-readonly', db, 'SELECT count(*) FROM active_users;']);
const countPython = (db: string) =>
  asReader([
    PYTHON,
    '-c',
    'import sqlite3,sys; c=sqlite3.connect("file:"+sys.argv[1]+"?mode=ro", uri=True); print(c.execute("SELECT count(*) FROM active_users").fetchone()[0])',
    db,
  ]);
const mode = (p: string) => statSync(p).mode & 0o7777;

const runnable = hasSqlite3 && canSetpriv;

if (runnable)
  describe('readers in MIRROR_GROUP', () => {
    it('read a mirror made with MIRROR_GROUP with sqlite3 -readonly and mode=ro after sync --once exited (no daemon)', async () => {
      const mirrorDb = join(base, 'made', 'data', 'mirror.db');
      const synced = await runCli(['sync', '--once'], syncEnv(mirrorDb, String(GROUP_GID)), 60_000);
      expect(synced.code, synced.stderr).toBe(0);
      expect(mode(mirrorDb)).toBe(0o640);
      expect(mode(`${mirrorDb}-wal`)).toBe(0o640);
      expect(statSync(`${mirrorDb}-shm`).gid).toBe(GROUP_GID);

      const read = count(mirrorDb);
      expect(read.stderr).toBe('');
      expect(read.stdout.trim()).toBe('300');
      // Python's mode=ro as well, where the host has a system Python the reader may run.
      if (hasPython) expect(countPython(mirrorDb)).toMatchObject({ status: 0, stdout: '300\n' });

      // A second sync while nothing reads, then again: the reader sees the new state, not a stale index.
      standIn.directory.delete(standIn.directory.page(0, 3).map((u) => String(u.user_id)));
      const again = await runCli(['sync', '--once'], syncEnv(mirrorDb, String(GROUP_GID)), 60_000);
      expect(again.code, again.stderr).toBe(0);
      expect(count(mirrorDb).stdout.trim()).toBe('297');
    }, 120_000);

    it('MIRROR_GROUP set later widens the files and the folder to the group, logged in one line, never to others', async () => {
      const dir = join(base, 'later', 'data');
      const mirrorDb = join(dir, 'mirror.db');
      // The operator's parent folder lets the group through; the mirror's own folder is this program's to set.
      mkdirSync(join(base, 'later'), { mode: 0o711 });
      chmodSync(join(base, 'later'), 0o711);
      const first = await runCli(['sync', '--once'], syncEnv(mirrorDb), 60_000);
      expect(first.code, first.stderr).toBe(0);
      expect(mode(mirrorDb)).toBe(0o600);
      expect(mode(dir)).toBe(0o700);
      expect(count(mirrorDb).status).not.toBe(0);

      const widened = await runCli(['sync', '--once'], syncEnv(mirrorDb, String(GROUP_GID)), 60_000);
      expect(widened.code, widened.stderr).toBe(0);
      const lines = widened.stderr.split('\n').filter((l) => l.includes('"event":"db.files_widened_to_group"'));
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0] ?? '{}') as { files: Array<{ path: string; from: string; to: string }> };
      expect(line.files).toEqual(
        expect.arrayContaining([
          { path: mirrorDb, from: '0600', to: '0640' },
          { path: dir, from: '0700', to: '02750' },
        ]),
      );
      for (const p of [mirrorDb, `${mirrorDb}-wal`, `${mirrorDb}-shm`]) {
        expect(mode(p)).toBe(0o640);
        expect(statSync(p).gid).toBe(GROUP_GID);
      }
      expect(mode(dir)).toBe(0o2750);
      expect(count(mirrorDb).stdout.trim()).toBe('297');

      // Once widened, a later open has nothing to say.
      const quiet = await runCli(['sync', '--once'], syncEnv(mirrorDb, String(GROUP_GID)), 60_000);
      expect(quiet.stderr).not.toContain('db.files_widened_to_group');
    }, 120_000);

    it('read at once after a restore, before any sync: the restore leaves the -wal and -shm with the group', async () => {
      const mirrorDb = join(base, 'restored', 'data', 'mirror.db');
      const env = syncEnv(mirrorDb, String(GROUP_GID));
      expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
      const backup = join(base, 'restored', 'backup.db');
      const taken = await runCli(['backup', backup], env, 60_000);
      expect(taken.code, taken.stderr).toBe(0);
      const restored = await runCli(['restore', backup], env, 60_000);
      expect(restored.code, restored.stderr).toBe(0);
      for (const p of [mirrorDb, `${mirrorDb}-wal`, `${mirrorDb}-shm`]) {
        expect(mode(p), p).toBe(0o640);
        expect(statSync(p).gid, p).toBe(GROUP_GID);
      }
      const read = count(mirrorDb);
      expect(read.stderr).toBe('');
      expect(read.stdout.trim()).toBe(String(standIn.directory.page(0, 1_000).length));
      if (hasPython) expect(countPython(mirrorDb).status).toBe(0);
    }, 120_000);
  });
else
  describe('readers in MIRROR_GROUP', () => {
    it(`NOT RUN: needs the sqlite3 CLI (${hasSqlite3 ? 'found' : 'missing: apt-get install sqlite3'}) and setpriv as root (${canSetpriv ? 'works' : 'fails'})`, () => {
      expect(runnable).toBe(false);
    });
  });
