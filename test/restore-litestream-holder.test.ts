/**
 * `restore` while the real Litestream (the devDependency
 * @flydotio/litestream-linux-x64, with the shipped
 * contrib/litestream/litestream.yml) replicates the mirror: refused (exit 5,
 * the mirror untouched), naming the Litestream process and advising to stop
 * Litestream, not `pm2 stop user-mirror` (which leaves Litestream holding
 * the file). Once Litestream is stopped, the same restore succeeds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { ROOT } from './support/mirror-fixtures.js';

const LITESTREAM = join(ROOT, 'node_modules', '@flydotio', 'litestream-linux-x64', 'litestream');
const CONFIG = join(ROOT, 'contrib', 'litestream', 'litestream.yml');
const HAVE_LITESTREAM = existsSync(LITESTREAM);

let standIn: StandIn;
let dir: string;
let litestream: ChildProcess | undefined;
let litestreamLog = '';

beforeAll(async () => {
  requireBuiltCli('src/commands/restore.js');
  standIn = await startStandIn({ port: 0, users: 300, seed: 97 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-restore-litestream-'));
});

afterAll(async () => {
  litestream?.kill('SIGKILL');
  await standIn?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe.runIf(HAVE_LITESTREAM)('restore while Litestream holds the mirror', () => {
  it('is refused naming Litestream and advising to stop it; with Litestream stopped it succeeds', async () => {
    const mirror = join(dir, 'data', 'mirror.db');
    const replica = join(dir, 'replica');
    const env = {
      PATH: process.env.PATH,
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: mirror,
      MIRROR_CHECKPOINTS: 'external',
      LOG_LEVEL: 'warn',
    };
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    const backup = join(dir, 'backup.db');
    expect((await runCli(['backup', backup], env, 60_000)).code).toBe(0);

    litestream = spawn(LITESTREAM, ['replicate', '-config', CONFIG], {
      env: { PATH: process.env.PATH, MIRROR_DB: mirror, LITESTREAM_REPLICA_URL: `file://${replica}`, LITESTREAM_S3_ENDPOINT: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    litestream.stdout?.on('data', (d: Buffer) => (litestreamLog += d.toString()));
    litestream.stderr?.on('data', (d: Buffer) => (litestreamLog += d.toString()));
    await eventually(
      () => existsSync(join(replica, 'generations')) && readdirSync(join(replica, 'generations')).length > 0,
      60_000,
      () => `Litestream's first snapshot\n${litestreamLog}`,
    );

    const before = readFileSync(mirror);
    const refused = await runCli(['restore', backup], env, 60_000);
    expect(refused.code, refused.stderr).toBe(5);
    expect(refused.stderr).toMatch(new RegExp(`is open in pid ${litestream.pid} \\(\\S*litestream replicate -config `));
    expect(refused.stderr).toMatch(
      /stop Litestream \(systemctl stop litestream-user-mirror as docs\/backup.md sets it up; start it again after the restore\)/,
    );
    expect(refused.stderr).not.toContain('pm2 stop user-mirror');
    expect(readFileSync(mirror).equals(before)).toBe(true);

    const stopped = litestream;
    const exited = new Promise((r) => stopped.once('exit', r));
    stopped.kill('SIGTERM');
    await exited;
    litestream = undefined;
    const done = await runCli(['restore', backup], env, 60_000);
    expect(done.code, done.stderr).toBe(0);
  }, 180_000);
});

describe.skipIf(HAVE_LITESTREAM)('restore while Litestream holds the mirror', () => {
  it('NOT RUN: no Litestream binary (the devDependency @flydotio/litestream-linux-x64 is for Linux x64 only)', () => {
    expect(HAVE_LITESTREAM).toBe(false);
  });
});
