/**
 * pm2 itself runs the ecosystem file: start, online, ready, graceful stop,
 * kill. PM2_HOME (and HOME) point at a temporary directory, so this never
 * talks to, starts or stops a pm2 of the machine's user.
 *
 * pm2 runs on the Node under test (process.execPath), and the daemon must
 * run on that same Node, the one better-sqlite3 was built for, even with
 * another `node` first on PATH (here a decoy that fails): that is the
 * machine's /usr/bin/node when the suite runs on another Node.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VitalClient } from '@tryvital/vital-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENV, SERVE_ENV } from '../src/runtime/config.js';
import { FILE_SECRETS, isFileSecret } from '../src/runtime/secret-files.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { CLI, ROOT, daemonEnv, getStatus, keysAsFiles } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';
import { REDIS_URL_CASES, REDIS_URL_PASSWORD } from './support/redis-url-cases.js';

const PM2 = join(ROOT, 'node_modules', '.bin', 'pm2');
const ECOSYSTEM = join(ROOT, 'ecosystem.config.cjs');
const APP = `user-mirror-test-${process.pid}`;

interface EcosystemApp {
  name: string;
  script: string;
  args: string[];
  interpreter: string;
  exec_mode: string;
  instances: number;
  wait_ready: boolean;
  listen_timeout: number;
  kill_timeout: number;
  exp_backoff_restart_delay: number;
  max_memory_restart: string;
  out_file: string;
  error_file: string;
  stop_exit_codes: number[];
  env: Record<string, string>;
}

/** Loads the ecosystem file afresh with `env` as the environment of `pm2 start`: its apps. */
function loadApps(env: Record<string, string>): EcosystemApp[] {
  const require = createRequire(import.meta.url);
  const saved = { ...process.env };
  try {
    Object.assign(process.env, env);
    delete require.cache[require.resolve(ECOSYSTEM)];
    return (require(ECOSYSTEM) as { apps: EcosystemApp[] }).apps;
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

/** The one app (the daemon) of an ecosystem without a replica of its own. */
function loadEcosystem(env: Record<string, string>): EcosystemApp {
  const apps = loadApps(env);
  const app = apps[0];
  if (app === undefined || apps.length !== 1) throw new Error('expected exactly one app');
  return app;
}

describe('ecosystem.config.cjs', () => {
  it('with REPLICA_WORKERS above 1, runs the replica as an app of its own with that many processes, and not in the daemon', () => {
    const apps = loadApps({
      REPLICA_PORT: '8788',
      REPLICA_WORKERS: '4',
      REPLICA_API_KEY_FILE: '/srv/keys/replica',
      MIRROR_DB: '/srv/m.db',
    });
    expect(apps.map((a) => a.args)).toEqual([['daemon'], ['serve']]);
    const [daemon, replica] = apps;
    // Empty, so the daemon's own reading of .env cannot give it the port either.
    expect(daemon?.env.REPLICA_PORT).toBe('');
    expect(replica?.env).toMatchObject({
      REPLICA_PORT: '8788',
      REPLICA_WORKERS: '4',
      REPLICA_API_KEY_FILE: '/srv/keys/replica',
      MIRROR_DB: '/srv/m.db',
    });
    expect(replica?.interpreter).toBe(process.execPath);
    expect(loadApps({ REPLICA_PORT: '8788', REPLICA_WORKERS: '1' })).toHaveLength(1);
  });

  it("passes the replica's app every variable `serve` reads, from the registry (TLS_BY_PROXY was once left out)", () => {
    const given = Object.fromEntries(SERVE_ENV.filter((n) => !isFileSecret(n)).map((n) => [n, `value-of-${n}`]));
    const apps = loadApps({ ...given, REPLICA_PORT: '8788', REPLICA_WORKERS: '2', SERVICE_API_KEY_FILE: '/keys/service' });
    expect(apps[1]?.env).toMatchObject({ ...given, REPLICA_PORT: '8788', REPLICA_WORKERS: '2', SERVICE_API_KEY_FILE: '/keys/service' });
    expect(given).toHaveProperty('TLS_BY_PROXY');
  });

  it('runs one forked instance of the built daemon, with room for a graceful stop', () => {
    const app = loadEcosystem({ SHUTDOWN_TIMEOUT_MS: '40000' });
    expect(app.script).toBe(CLI);
    expect(app.args).toEqual(['daemon']);
    // The Node that runs `pm2 start`, not a `node` looked up on PATH.
    expect(app.interpreter).toBe(process.execPath);
    expect(app.exec_mode).toBe('fork');
    expect(app.instances).toBe(1);
    expect(app.wait_ready).toBe(true);
    expect(app.listen_timeout).toBeGreaterThan(0);
    expect(app.kill_timeout).toBeGreaterThan(40_000 + 5_000);
    expect(app.exp_backoff_restart_delay).toBeGreaterThan(0);
    expect(app.max_memory_restart).toMatch(/^\d+[GMK]?$/);
    expect(app.out_file).toMatch(/\.log$/);
    expect(app.error_file).toMatch(/\.log$/);
    expect(app.stop_exit_codes).toEqual([2]);
    expect(loadEcosystem({}).kill_timeout).toBeGreaterThan(25_000 + 5_000);
  });

  it('passes every configuration variable through, secrets by their _FILE only, and holds no values of its own', () => {
    const plain = Object.keys(ENV).filter((k) => !isFileSecret(k) || k === 'REDIS_URL');
    const all = {
      ...Object.fromEntries(plain.map((k) => [k, `value-of-${k}`])),
      ...Object.fromEntries(FILE_SECRETS.map((k) => [`${k}_FILE`, `/keys/${k}`])),
      CREDENTIALS_DIRECTORY: '/run/credentials/user-mirror.service',
    };
    const app = loadEcosystem(all);
    expect(app.env).toMatchObject(all);
    for (const name of FILE_SECRETS.filter((k) => k !== 'REDIS_URL')) expect(app.env[name], name).toBeUndefined();
    const source = readFileSync(ECOSYSTEM, 'utf8');
    expect(source).not.toMatch(/(sk|pk_us|pk_eu|mg)_[0-9a-f]{8,}/);
    expect(source).not.toMatch(/redis:\/\/[^'"\s]*@/);
  });

  it('refuses a secret given by value, which pm2 save would write in clear, naming the _FILE to use', () => {
    for (const name of FILE_SECRETS.filter((k) => k !== 'REDIS_URL')) {
      expect(() => loadApps({ [name]: 'x' }), name).toThrow(`${name} set in the environment of pm2 start`);
      expect(() => loadApps({ [name]: 'x' }), name).toThrow(`set ${name}_FILE instead`);
    }
    // A REDIS_URL by the CLI's rule (src/runtime/url-secrets.ts): a password in the user info or the query, any case.
    for (const { url, password } of REDIS_URL_CASES) {
      if (!password) {
        expect(loadEcosystem({ REDIS_URL: url }).env.REDIS_URL, url).toBe(url);
        continue;
      }
      const refusal = (() => {
        try {
          loadApps({ REDIS_URL: url });
        } catch (err) {
          return (err as Error).message;
        }
        return 'not refused';
      })();
      expect(refusal, url).toContain('REDIS_URL set in the environment of pm2 start');
      expect(refusal, url).toContain('set REDIS_URL_FILE instead');
      expect(refusal, url).not.toContain(REDIS_URL_PASSWORD);
    }
    for (const name of ['REDIS_CLUSTER_NODES', 'REDIS_SENTINELS']) {
      expect(() => loadApps({ [name]: `app:${REDIS_URL_PASSWORD}@10.0.0.5:26379` }), name).toThrow(/set REDIS_PASSWORD_FILE/);
      expect(loadEcosystem({ [name]: '10.0.0.5:26379,10.0.0.6:26379' }).env[name]).toBe('10.0.0.5:26379,10.0.0.6:26379');
    }
  });
});

describe('under pm2', () => {
  let redis: TestRedis;
  let standIn: StandIn;
  let dir: string;
  let env: Record<string, string>;
  let statusPort: number;
  let replicaPort: number;
  const replicaKey = `rk_pm2_${process.pid}`;

  const pm2 = (args: readonly string[], timeoutMs = 60_000) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [PM2, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
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

  const describeApp = async (): Promise<
    { status: string; exec_mode: string; instances: number; restarts: number; interpreter: string | null } | undefined
  > => {
    const res = await pm2(['jlist']);
    const list = JSON.parse(res.stdout.slice(res.stdout.indexOf('['))) as Array<{
      name: string;
      pm2_env: { status: string; exec_mode: string; instances: number; restart_time: number; exec_interpreter: string | null };
    }>;
    const app = list.find((p) => p.name === APP);
    return (
      app && {
        status: app.pm2_env.status,
        exec_mode: app.pm2_env.exec_mode,
        instances: app.pm2_env.instances,
        restarts: app.pm2_env.restart_time,
        interpreter: app.pm2_env.exec_interpreter,
      }
    );
  };

  beforeAll(async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 600, seed: 33 });
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-pm2-'));
    statusPort = await freePort();
    replicaPort = await freePort();
    // A `node` first on PATH that is not the Node under test.
    const decoyBin = join(dir, 'decoy-bin');
    mkdirSync(decoyBin);
    writeFileSync(join(decoyBin, 'node'), '#!/bin/sh\necho "decoy node on PATH ran: $*" >&2\nexit 97\n', { mode: 0o755 });
    env = keysAsFiles(
      {
        PATH: `${decoyBin}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        ...daemonEnv({
          redisUrl: redis.url,
          standIn,
          mirrorDb: join(dir, 'mirror.db'),
          queuePrefix: 'pm2',
          statusPort,
          cron: '*/5 * * * * *',
        }),
        HOME: dir,
        PM2_HOME: join(dir, 'pm2-home'),
        USER_MIRROR_LOG_DIR: join(dir, 'logs'),
        USER_MIRROR_APP_NAME: APP,
        // The daemon's replica, keyed the way the official SDK sends its key.
        REPLICA_PORT: String(replicaPort),
        REPLICA_API_KEY: replicaKey,
        REPLICA_API_KEY_HEADER: 'x-vital-api-key',
      },
      join(dir, 'keys'),
    );
  });

  afterAll(async () => {
    if (env !== undefined) await pm2(['kill']).catch(() => undefined);
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('starts the daemon, sees it online and ready, serves the replica with the service down, stops it gracefully, and is killed', async () => {
    const started = await pm2(['start', ECOSYSTEM]);
    expect(started.code, started.stderr).toBe(0);

    const outLog = join(dir, 'logs', 'user-mirror.out.log');
    const logLines = () =>
      existsSync(outLog)
        ? readFileSync(outLog, 'utf8')
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l) as { event?: string; signal?: string; node?: string })
        : [];

    // Ready (the IPC message pm2 waits for) and online.
    await eventually(() => logLines().some((l) => l.event === 'daemon.ready'), 30_000, 'daemon.ready in the pm2 log');
    const app = await eventually(
      async () => {
        const a = await describeApp();
        return a?.status === 'online' ? a : undefined;
      },
      30_000,
      'pm2 to show the app online',
    );
    expect(app).toMatchObject({ exec_mode: 'fork_mode', instances: 1, restarts: 0, interpreter: process.execPath });
    // The daemon runs on the Node under test.
    expect(
      logLines()
        .filter((l) => l.event === 'daemon.starting')
        .map((l) => l.node),
    ).toEqual([process.version]);
    // Ready once the start-up sync has made the new mirror fresh.
    await eventually(async () => (await getStatus(statusPort, '/readyz')).status === 200, 30_000, '/readyz 200');
    // Node's compile cache, in this account's folder under HOME, 0700: the sync processes fill it as they exit.
    const cacheDir = join(dir, '.cache', 'user-mirror', 'compile-cache');
    await eventually(
      () => existsSync(cacheDir) && readdirSync(cacheDir, { recursive: true }).length > 1,
      30_000,
      'compile cache files under HOME',
    );
    expect(statSync(cacheDir).mode & 0o777).toBe(0o700);

    // The real service goes away; the official SDK, pointed at the replica, still resolves users.
    const someone = [...standIn.directory.records()][7];
    await standIn.close();
    const sdk = new VitalClient({ apiKey: replicaKey, baseUrl: `http://127.0.0.1:${replicaPort}`, maxRetries: 0 });
    const resolved = await sdk.user.getByClientUserId(String(someone?.client_user_id));
    expect(resolved.userId).toBe(someone?.user_id);

    // `pm2 save`, as the README's deploy runs it: the dump holds no key (they came as files).
    const saved = await pm2(['save']);
    expect(saved.code, saved.stderr).toBe(0);
    const dump = readFileSync(join(dir, 'pm2-home', 'dump.pm2'), 'utf8');
    expect(dump).toContain(APP);
    for (const key of [standIn.apiKey, standIn.managementKey, replicaKey]) expect(dump).not.toContain(key);
    expect(dump).toContain('SERVICE_API_KEY_FILE');
    // The logs pm2 writes are this account's alone.
    expect(statSync(join(dir, 'logs')).mode & 0o777).toBe(0o700);
    expect(statSync(outLog).mode & 0o777).toBe(0o600);

    const stopped = await pm2(['stop', APP]);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await describeApp())?.status).toBe('stopped');
    const lines = logLines();
    expect(lines.some((l) => l.event === 'daemon.shutdown_started' && l.signal === 'SIGINT')).toBe(true);
    expect(lines.some((l) => l.event === 'daemon.stopped')).toBe(true);
    const pm2Log = readFileSync(join(dir, 'pm2-home', 'pm2.log'), 'utf8');
    expect(pm2Log).toMatch(new RegExp(`App \\[${APP}:\\d+\\] exited with code \\[0\\] via signal \\[SIGINT\\]`));

    const killed = await pm2(['kill']);
    expect(killed.code).toBe(0);
  });
});
