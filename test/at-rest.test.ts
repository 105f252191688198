/**
 * Safe at rest, as an operator's host has it: umask 022, the app in a folder
 * every account can enter. A sync, a removal and the daemon create the
 * mirror, its -wal and -shm, the audit and the data folder with keys given
 * only as files; then the unprivileged account `nobody` (setpriv) can read
 * none of them. A mirror found wider is narrowed at the next writable open.
 * With MIRROR_GROUP, members of that group read the mirror; nobody else does.
 */
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { daemonEnv, runCli, spawnDaemon } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

const run = promisify(execFile);
const NOBODY = 65534;

/** Runs `args` as `nobody` (no supplementary groups, or `groups`): the exit code and stderr. */
async function asNobody(args: string[], groups: number[] = []): Promise<{ code: number; stderr: string; stdout: string }> {
  const ids = [
    '--reuid',
    String(NOBODY),
    '--regid',
    String(NOBODY),
    ...(groups.length > 0 ? ['--groups', groups.join(',')] : ['--clear-groups']),
  ];
  return run('setpriv', [...ids, '--', ...args]).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

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

let dir: string;
let redis: TestRedis;
let standIn: StandIn;
let keys: Record<string, string>;
const savedUmask = process.umask(0o022);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-at-rest-'));
  // mkdtemp makes a 0700 folder, which alone would hide everything: an app folder is usually open to all.
  chmodSync(dir, 0o755);
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: 300, seed: 27 });
  // The keys as an operator keeps them: files only this account reads, in a folder of its own.
  const keyDir = join(dir, 'keys');
  mkdirSync(keyDir, { mode: 0o700 });
  writeFileSync(join(keyDir, 'service-api-key'), `${standIn.apiKey}\n`, { mode: 0o600 });
  writeFileSync(join(keyDir, 'management-key'), `${standIn.managementKey}\n`, { mode: 0o600 });
  keys = { SERVICE_API_KEY_FILE: join(keyDir, 'service-api-key'), MANAGEMENT_KEY_FILE: join(keyDir, 'management-key') };
});

afterAll(async () => {
  process.umask(savedUmask);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** daemonEnv with the keys as files only. */
function envFor(mirrorDb: string, extra: Record<string, string> = {}): Record<string, string> {
  const env = daemonEnv({ redisUrl: redis.url, standIn, mirrorDb, queuePrefix: 'at-rest', statusPort: 0, cron: '0 0 1 1 *', extra });
  delete env.SERVICE_API_KEY;
  delete env.MANAGEMENT_KEY;
  return { ...env, ...keys };
}

describe('files the project creates, under umask 022', () => {
  it('sync --once, a removal and the daemon leave nothing another account can read', async () => {
    const data = join(dir, 'app', 'data');
    const mirrorDb = join(data, 'mirror.db');
    const env = envFor(mirrorDb, { ALLOW_VOLATILE_REDIS: '1' });

    const sync = await runCli(['sync', '--once'], env);
    expect(sync.code, sync.stderr).toBe(0);

    const daemon = spawnDaemon(env);
    try {
      await daemon.ready;
      const m = { org_id: '7b1e2c1a-3f4d-4e5f-8a9b-0c1d2e3f4a5b', member_id: '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d' };
      standIn.members.add(m.org_id, m.member_id);
      const removal = await runCli(['remove-member', m.org_id, m.member_id, '--wait', '--timeout', '90'], env);
      expect(removal.code, removal.stderr).toBe(0);
      expect(removal.stdout).toMatch(/succeeded/);
      // While the daemon holds the mirror open, its -wal and -shm exist: they are private too.
      const open = tree(data);
      expect(open.map((p) => p.slice(data.length))).toEqual(expect.arrayContaining(['', '/mirror.db', '/mirror-audit.db']));
      expect(open.some((p) => p.endsWith('-wal') || p.endsWith('-shm'))).toBe(true);
      for (const path of open) expect([path, mode(path)]).toEqual([path, path === data ? 0o700 : 0o600]);
    } finally {
      await daemon.stop('SIGTERM');
    }

    for (const path of tree(data)) {
      expect([path, mode(path)]).toEqual([path, path === data ? 0o700 : 0o600]);
      const read = await asNobody(statSync(path).isDirectory() ? ['ls', path] : ['cat', path]);
      expect(read.code, path).not.toBe(0);
      expect(read.stderr).toMatch(/Permission denied/);
    }
    // The same account reads them all: it is the mode, not a broken file.
    expect(statSync(mirrorDb).size).toBeGreaterThan(0);
  });

  it('narrows a mirror found readable by others at the next writable open, and says so', async () => {
    const data = join(dir, 'wide');
    mkdirSync(data, { mode: 0o755 });
    chmodSync(data, 0o755);
    const seed = join(dir, 'seed.db');
    expect((await runCli(['sync', '--once'], envFor(seed))).code).toBe(0);
    const mirrorDb = join(data, 'mirror.db');
    copyFileSync(seed, mirrorDb);
    chmodSync(mirrorDb, 0o644);
    // Reading its first bytes is reading it (all of it would overflow the child's output buffer).
    expect((await asNobody(['head', '-c', '16', mirrorDb])).code).toBe(0);

    const sync = await runCli(['sync', '--once'], envFor(mirrorDb));
    expect(sync.code, sync.stderr).toBe(0);
    expect(sync.stderr).toContain(`${mirrorDb} was mode 0644, readable by other accounts: narrowed to 0600`);
    expect(mode(mirrorDb)).toBe(0o600);
    expect((await asNobody(['head', '-c', '16', mirrorDb])).code).not.toBe(0);
  });
});

describe('MIRROR_GROUP', () => {
  const group = `umr${process.pid % 100_000}`;
  let gid: number;

  beforeAll(async () => {
    await run('groupadd', [group]);
    gid = Number((await run('getent', ['group', group])).stdout.split(':')[2]);
  });
  afterAll(async () => {
    await run('groupdel', [group]).catch(() => undefined);
  });

  it('gives the mirror to the group (0640, folder 02750): its members read it, others cannot', async () => {
    const data = join(dir, 'shared', 'data');
    const mirrorDb = join(data, 'mirror.db');
    const env = envFor(mirrorDb, { MIRROR_GROUP: group, ALLOW_VOLATILE_REDIS: '1' });
    const sync = await runCli(['sync', '--once'], env);
    expect(sync.code, sync.stderr).toBe(0);
    expect(mode(data)).toBe(0o2750);
    expect(statSync(data).gid).toBe(gid);
    expect(mode(mirrorDb)).toBe(0o640);
    expect(statSync(mirrorDb).gid).toBe(gid);

    // An analytics job in the group reads the mirror while the daemon runs (it keeps the -wal and -shm, the group's too).
    const daemon = spawnDaemon(env);
    try {
      await daemon.ready;
      await eventually(() => readdirSync(data).some((f) => f.endsWith('-shm')), 10_000, 'the -shm file');
      for (const f of readdirSync(data)) {
        expect([f, mode(join(data, f)), statSync(join(data, f)).gid]).toEqual([f, 0o640, gid]);
      }
      const count = `SELECT count(*) FROM users WHERE deleted_at IS NULL`;
      const member = await asNobody(['sqlite3', '-readonly', mirrorDb, count], [gid]);
      expect(member.stderr).toBe('');
      expect(member.stdout.trim()).toBe('300');
      const other = await asNobody(['sqlite3', '-readonly', mirrorDb, count]);
      expect(other.code).not.toBe(0);
    } finally {
      await daemon.stop('SIGTERM');
    }
  });

  it('refuses a group that does not exist, by name, before creating anything', async () => {
    const mirrorDb = join(dir, 'nogroup', 'mirror.db');
    const res = await runCli(['sync', '--once'], envFor(mirrorDb, { MIRROR_GROUP: 'no-such-group-xyz' }));
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("MIRROR_GROUP: no group 'no-such-group-xyz' on this host");
    expect(() => statSync(join(dir, 'nogroup'))).toThrow();
  });
});
