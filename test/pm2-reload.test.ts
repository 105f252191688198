/**
 * An edited .env takes effect on `pm2 reload` (issue 50): the deploy moves
 * REDIS_URL to REDIS_URL_FILE, as the ACL section asks, and reloads. pm2
 * keeps the environment of the start and never drops a variable from it, so
 * a REDIS_URL copied there from .env outlived its removal, and the daemon
 * exited 2 ("REDIS_URL: set more than once") under a reload that printed ✓.
 * Now ecosystem.config.cjs hands pm2 no value of .env and the daemon reads
 * the file itself at each start.
 *
 * pm2 runs with PM2_HOME and HOME in a temporary directory (test/pm2.test.ts),
 * never the machine user's pm2. The first Redis is the one of the start; the
 * URL file names a second one, so the reloaded daemon shows which it uses.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { CLI, ROOT, daemonEnv, keysAsFiles } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

const PM2 = join(ROOT, 'node_modules', '.bin', 'pm2');
const ECOSYSTEM = join(ROOT, 'ecosystem.config.cjs');
const APP = `user-mirror-reload-${process.pid}`;

interface LogLine {
  event?: string;
  redis?: string;
  pid?: number;
}

describe('pm2 reload after editing .env', () => {
  let first: TestRedis;
  let second: TestRedis;
  let standIn: StandIn;
  let dir: string;
  let envFile: string;
  let pm2Env: Record<string, string>;

  const pm2 = (args: readonly string[], timeoutMs = 90_000) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [PM2, ...args], { cwd: ROOT, env: pm2Env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`pm2 ${args.join(' ')} timed out: ${stdout} ${stderr}`));
      }, timeoutMs);
      child.once('error', reject);
      child.once('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });

  const logLines = (): LogLine[] => {
    const file = join(dir, 'logs', 'user-mirror.out.log');
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as LogLine);
  };

  const appStatus = async (): Promise<string | undefined> => {
    const res = await pm2(['jlist']);
    const list = JSON.parse(res.stdout.slice(res.stdout.indexOf('['))) as Array<{ name: string; pm2_env: { status: string } }>;
    return list.find((p) => p.name === APP)?.pm2_env.status;
  };

  /** .env as an operator writes it: NAME=value lines. */
  const writeEnvFile = (vars: Record<string, string>): void => {
    writeFileSync(
      envFile,
      `${Object.entries(vars)
        .map(([k, v]) => `${k}=${v}`)
        .join('\n')}\n`,
      { mode: 0o600 },
    );
  };

  beforeAll(async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    first = await startTestRedis();
    second = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 50, seed: 50 });
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-pm2-reload-'));
    envFile = join(dir, 'app.env');
    pm2Env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: dir,
      PM2_HOME: join(dir, 'pm2-home'),
      USER_MIRROR_LOG_DIR: join(dir, 'logs'),
      USER_MIRROR_APP_NAME: APP,
      // Nothing of the daemon's configuration in pm2's environment: all of it is in the file.
      ENV_FILE: envFile,
    };
  });

  afterAll(async () => {
    if (pm2Env !== undefined) await pm2(['kill']).catch(() => undefined);
    await standIn?.close();
    await first?.stop();
    await second?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('moving REDIS_URL to REDIS_URL_FILE in .env, then `pm2 reload`, runs the daemon with the new setting', async () => {
    const settings = keysAsFiles(
      daemonEnv({
        redisUrl: first.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: 'pm2-reload',
        statusPort: await freePort(),
        cron: '*/30 * * * * *',
      }),
      join(dir, 'keys'),
    );
    writeEnvFile(settings);
    const started = await pm2(['start', ECOSYSTEM]);
    expect(started.code, started.stderr).toBe(0);
    await eventually(() => logLines().some((l) => l.event === 'daemon.ready'), 60_000, 'daemon.ready after pm2 start');
    expect(logLines().find((l) => l.event === 'daemon.starting')?.redis).toBe(first.url);

    // The deploy's edit: the URL moves to a file (here naming the second Redis), REDIS_URL leaves .env.
    const urlFile = join(dir, 'keys', 'redis_url');
    writeFileSync(urlFile, `${second.url}\n`, { mode: 0o600 });
    const { REDIS_URL: _moved, ...rest } = settings;
    writeEnvFile({ ...rest, REDIS_URL_FILE: urlFile });
    const startsBefore = logLines().filter((l) => l.event === 'daemon.starting').length;

    const reloaded = await pm2(['reload', APP]);
    expect(reloaded.code, reloaded.stderr).toBe(0);
    const restarted = await eventually(
      () => logLines().filter((l) => l.event === 'daemon.starting')[startsBefore],
      60_000,
      'the daemon to start again after pm2 reload',
    );
    expect(restarted.redis).toBe(second.url);
    await eventually(
      () => logLines().some((l) => l.event === 'daemon.ready' && l.pid === restarted.pid),
      60_000,
      'the reloaded daemon ready',
    );
    expect(await appStatus()).toBe('online');
    const errLog = readFileSync(join(dir, 'logs', 'user-mirror.err.log'), 'utf8');
    expect(errLog).not.toMatch(/set more than once/);
    expect(readFileSync(join(dir, 'pm2-home', 'pm2.log'), 'utf8')).not.toMatch(/exited with code \[2\]/);

    // And `pm2 restart --update-env`, the other advice, after a second edit: back to REDIS_URL.
    writeEnvFile(settings);
    const startsThen = logLines().filter((l) => l.event === 'daemon.starting').length;
    const restartedAgain = await pm2(['restart', APP, '--update-env']);
    expect(restartedAgain.code, restartedAgain.stderr).toBe(0);
    const again = await eventually(
      () => logLines().filter((l) => l.event === 'daemon.starting')[startsThen],
      60_000,
      'the daemon to start again after pm2 restart --update-env',
    );
    expect(again.redis).toBe(first.url);
    await eventually(() => logLines().some((l) => l.event === 'daemon.ready' && l.pid === again.pid), 60_000, 'the restarted daemon ready');
    expect(await appStatus()).toBe('online');
  });
});
