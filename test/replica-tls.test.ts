/**
 * Nothing personal crosses a network in clear (issue 50). With a private CA
 * made by docs/replica.md's `openssl` recipe, run as written: a leader's
 * `user-mirror serve` on https (REPLICA_TLS_CERT_FILE, REPLICA_TLS_KEY_FILE);
 * a follower that syncs from it over https, verifying it with
 * SERVICE_CA_FILE; the same follower refused, with a clear error, with the
 * wrong CA and with none; the official SDK through NODE_EXTRA_CA_CERTS; a
 * renewed certificate served to new connections with no restart (its serial
 * seen by a new handshake), a renewal to a broken pair refused with the old
 * certificate kept; the daemon's replica (REPLICA_PORT) on https too. All
 * real processes of the built CLI (and a redis-server of the test's), on
 * loopback.
 *
 * Then the refusals at start, which only read configuration (nothing binds
 * beyond loopback, nothing connects): a replica on 0.0.0.0 without TLS, half
 * a pair, a pair that is not one; SERVICE_BASE_URL, MANAGEMENT_URL and
 * WEBHOOK_URL as plain http: to another host; and TLS_BY_PROXY=1 accepting
 * them. Needs `npm run build` first.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { get } from 'node:https';
import { connect } from 'node:tls';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { readDaemonConfig } from '../src/daemon/daemon-config.js';
import { ConfigPass } from '../src/runtime/config.js';
import { MANAGEMENT_CLIENT_ENV } from '../src/service/client-from-config.js';
import { requireBuiltCli, runCli, startCli, type CliProcess } from './support/cli-process.js';
import { ROOT, daemonEnv, keysAsFiles, spawnDaemon } from './support/daemon-process.js';
import { problemsOf } from './support/config-problems.js';
import { freePort, startTestRedis } from './support/redis-server.js';
import { eventually } from './support/eventually.js';

const REPLICA_KEY = 'rk_tls_test_key_0123456789abcdef';
const USERS = 240;

let dir: string;
let standIn: StandIn;
let port: number;
let serve: CliProcess | undefined;
const at = (name: string) => join(dir, name);

/** docs/replica.md's recipe: the CA, the replica's key and request, the certificate. */
function recipe(): string[] {
  const lines = readFileSync(join(ROOT, 'docs', 'replica.md'), 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('openssl '));
  if (lines.length !== 3) throw new Error(`docs/replica.md: expected the TLS recipe's 3 openssl lines, found ${lines.length}`);
  return lines;
}

function sh(line: string): void {
  execFileSync('sh', ['-c', line], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** The recipe's lines with its file names replaced (`replica.key` → `next.key`, …). */
function renamed(lines: string[], names: Record<string, string>): string[] {
  return lines.map((l) => Object.entries(names).reduce((line, [from, to]) => line.replaceAll(` ${from}`, ` ${to}`), l));
}

/** A new key and certificate from the same CA, written beside the served ones as `<stem>.key` and `<stem>.pem`. */
function issue(stem: string): string {
  const [, request, sign] = recipe();
  for (const line of renamed([request ?? '', sign ?? ''], {
    'replica.key': `${stem}.key`,
    'replica.csr': `${stem}.csr`,
    'replica.pem': `${stem}.pem`,
  }))
    sh(line);
  return serialOf(`${stem}.pem`);
}

const serialOf = (file: string) => new X509Certificate(readFileSync(at(file))).serialNumber;

/** The serial of the certificate a new TLS connection to the replica is given (verified against the CA). */
function servedSerial(on = port): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: on, ca: readFileSync(at('ca.pem')), servername: 'localhost' }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.end();
      resolve(serial);
    });
    socket.once('error', reject);
  });
}

/** The replica's /metrics, over https, verified against the CA. */
function metrics(on = port): Promise<string> {
  return new Promise((resolve, reject) => {
    get(`https://127.0.0.1:${on}/metrics`, { ca: readFileSync(at('ca.pem')) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(body));
    }).once('error', reject);
  });
}

const gauge = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);

function followerEnv(name: string, extra: Record<string, string>): Record<string, string> {
  const env = {
    PATH: process.env.PATH ?? '',
    SERVICE_BASE_URL: `https://127.0.0.1:${port}`,
    SERVICE_API_KEY: REPLICA_KEY,
    MIRROR_DB: at(`${name}.db`),
    SYNC_LEADER_MAX_AGE_MS: '600000',
    SYNC_FOLLOW_LEADER: '1',
    LOG_LEVEL: 'info',
    ...extra,
  };
  return keysAsFiles(env, at(`${name}-keys`));
}

function activeUsers(name: string): number {
  const db = new Database(at(`${name}.db`), { readonly: true });
  try {
    return db.prepare<[], { n: number }>('SELECT count(*) AS n FROM users WHERE deleted_at IS NULL').get()?.n ?? -1;
  } finally {
    db.close();
  }
}

/** The SDK in a process of its own, as an operator's program runs it: `NODE_EXTRA_CA_CERTS` names the CA, or nothing does. */
function sdkList(extraCa: string | undefined): { status: number | null; stdout: string; stderr: string } {
  const program = [
    "import { VitalClient } from '@tryvital/vital-node';",
    'const sdk = new VitalClient({ apiKey: process.env.KEY, baseUrl: process.env.BASE, maxRetries: 0 });',
    'const page = await sdk.user.getAll({ offset: 0, limit: 5 });',
    'console.log(`${page.users.length} of ${page.total}`);',
  ].join('\n');
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', program], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      KEY: REPLICA_KEY,
      BASE: `https://127.0.0.1:${port}`,
      ...(extraCa === undefined ? {} : { NODE_EXTRA_CA_CERTS: extraCa }),
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(async () => {
  requireBuiltCli();
  dir = mkdtempSync(join(tmpdir(), 'replica-tls-'));
  for (const line of recipe()) sh(line);
  const [makeCa] = recipe();
  sh(renamed([makeCa ?? ''], { 'ca.key': 'other-ca.key', 'ca.pem': 'other-ca.pem' })[0] ?? '');
  standIn = await startStandIn({ port: 0, users: USERS, seed: 50 });
  const leader = await runCli(
    ['sync', '--once'],
    keysAsFiles(
      {
        PATH: process.env.PATH ?? '',
        SERVICE_BASE_URL: standIn.baseUrl,
        SERVICE_API_KEY: standIn.apiKey,
        SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
        MIRROR_DB: at('leader.db'),
      },
      at('leader-keys'),
    ),
    120_000,
  );
  expect(leader.code, leader.stderr).toBe(0);
  port = await freePort();
  serve = startCli(['serve'], {
    PATH: process.env.PATH,
    MIRROR_DB: at('leader.db'),
    REPLICA_API_KEY: REPLICA_KEY,
    REPLICA_PORT: String(port),
    REPLICA_TLS_CERT_FILE: at('replica.pem'),
    REPLICA_TLS_KEY_FILE: at('replica.key'),
  });
  await serve.line(/"event":"replica.listening"/, 60_000);
}, 180_000);

afterAll(async () => {
  serve?.child.kill('SIGTERM');
  await serve?.exited(60_000);
  await standIn?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("a leader's replica on https with a private CA", () => {
  it('says it serves https, with the certificate it serves', async () => {
    const listening = JSON.parse(await (serve as CliProcess).line(/"event":"replica.listening"/)) as {
      msg: string;
      tls: { serial: string };
    };
    expect(listening.msg).toBe(`replica on https://127.0.0.1:${port}`);
    expect(listening.tls.serial).toBe(serialOf('replica.pem'));
    expect(await servedSerial()).toBe(serialOf('replica.pem'));
  });

  it('a follower syncs from it over https, verifying it with SERVICE_CA_FILE', async () => {
    const r = await runCli(['sync', '--once'], followerEnv('follower', { SERVICE_CA_FILE: at('ca.pem') }), 120_000);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(activeUsers('follower')).toBe(USERS);
    expect(activeUsers('follower')).toBe(activeUsers('leader'));
  });

  it.each([
    ['the wrong CA', { SERVICE_CA_FILE: 'other-ca.pem' }, 'the CA(s) in SERVICE_CA_FILE did not sign it'],
    ['no CA (the system CAs)', {}, "a private CA's PEM file goes in SERVICE_CA_FILE"],
  ])('a follower with %s is refused at once with a clear error, and stores nothing', async (_what, ca, hint) => {
    const name = `refused-${Object.keys(ca).length}`;
    const extra: Record<string, string> = Object.fromEntries(Object.entries(ca).map(([k, v]) => [k, at(v)]));
    const started = Date.now();
    const r = await runCli(['sync', '--once'], followerEnv(name, extra), 120_000);
    const out = r.stdout + r.stderr;
    expect(r.code, out).not.toBe(0);
    expect(out).toContain("TLS failed: the server's certificate is not signed by a trusted CA");
    expect(out).toContain(hint);
    // Not retried: the next attempt meets the same certificate (SYNC_PAGE_RETRY_BUDGET_MS is 120 s).
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(activeUsers(name)).toBe(0);
  });

  it('serves the official SDK, which trusts the CA through NODE_EXTRA_CA_CERTS (and refuses the replica without it)', async () => {
    const trusted = sdkList(at('ca.pem'));
    expect(trusted.status, trusted.stderr).toBe(0);
    expect(trusted.stdout.trim()).toBe(`5 of ${USERS}`);
    const untrusted = sdkList(undefined);
    expect(untrusted.status).not.toBe(0);
    expect(untrusted.stdout).toBe('');
    // The replica counted the handshakes its certificate lost (the follower's refused runs' too).
    expect(gauge(await metrics(), 'user_mirror_replica_client_errors_total\\{reason="tls"\\}')).toBeGreaterThanOrEqual(1);
  });

  it('serves a renewed certificate to new connections with no restart; a renewal to a broken pair keeps the old one', async () => {
    const first = serialOf('replica.pem');
    const renewed = issue('next');
    expect(renewed).not.toBe(first);
    renameSync(at('next.key'), at('replica.key'));
    renameSync(at('next.pem'), at('replica.pem'));
    await eventually(async () => (await servedSerial()) === renewed, 30_000, 'the renewed certificate served');
    await (serve as CliProcess).line(new RegExp(`"event":"replica.tls_renewed".*"serial":"${renewed}"`));
    const validTo = new X509Certificate(readFileSync(at('replica.pem'))).validToDate.getTime() / 1000;
    expect(gauge(await metrics(), 'user_mirror_replica_tls_valid_to_seconds')).toBe(validTo);
    const again = await runCli(['sync', '--once'], followerEnv('follower', { SERVICE_CA_FILE: at('ca.pem') }), 120_000);
    expect(again.code, again.stdout + again.stderr).toBe(0);

    // The certificate of another key: not a pair with replica.key. Refused, the renewed one still served.
    const broken = issue('broken');
    renameSync(at('broken.pem'), at('replica.pem'));
    const refused = await (serve as CliProcess).line(/"event":"replica.tls_renewal_refused"/, 30_000);
    expect(refused).toContain(`REPLICA_TLS_KEY_FILE: ${at('replica.key')}: is not the key of the certificate in REPLICA_TLS_CERT_FILE`);
    expect(refused).toContain(`still serving certificate ${renewed}`);
    expect(await servedSerial()).toBe(renewed);
    const stillServed = sdkList(at('ca.pem'));
    expect(stillServed.status, stillServed.stderr).toBe(0);

    // Its key put in place too: the next change is tried again, and taken.
    renameSync(at('broken.key'), at('replica.key'));
    await eventually(async () => (await servedSerial()) === broken, 30_000, 'the repaired pair served');
    expect(serve?.child.exitCode).toBeNull();
  }, 120_000);
});

describe('refused at start: nothing in clear beyond this host', () => {
  const quiet = () => undefined;
  const daemon = (env: Record<string, string>) =>
    readDaemonConfig({ SERVICE_API_KEY: 'team-key', MIRROR_DB: '/tmp/never-opened.db', ...env }, quiet);
  const onLoopback = { SERVICE_BASE_URL: 'http://127.0.0.1:9' };

  it('a replica on 0.0.0.0 without TLS (serve: exit 2, naming REPLICA_HOST and the settings that fix it)', async () => {
    const r = await runCli(['serve'], {
      PATH: process.env.PATH,
      MIRROR_DB: at('leader.db'),
      REPLICA_HOST: '0.0.0.0',
      REPLICA_API_KEY: REPLICA_KEY,
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      'REPLICA_HOST: 0.0.0.0 is beyond loopback and would serve health data and keys in clear; give the replica a certificate (REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE), or TLS_BY_PROXY=1 when a TLS proxy stands in front',
    );
    const replica = { ...onLoopback, REPLICA_PORT: '8788', REPLICA_API_KEY: REPLICA_KEY };
    expect(problemsOf(() => daemon({ ...replica, REPLICA_HOST: '10.0.0.5' }))).toEqual([
      expect.stringMatching(/^REPLICA_HOST: 10\.0\.0\.5 is beyond loopback/),
    ]);
    expect(daemon({ ...replica, REPLICA_HOST: '0.0.0.0', TLS_BY_PROXY: '1' }).REPLICA_HOST).toBe('0.0.0.0');
    expect(
      daemon({ ...replica, REPLICA_HOST: '0.0.0.0', REPLICA_TLS_CERT_FILE: at('replica.pem'), REPLICA_TLS_KEY_FILE: at('replica.key') })
        .REPLICA_TLS_CERT_FILE,
    ).toBe(at('replica.pem'));
    expect(daemon({ ...replica, REPLICA_HOST: '127.0.0.1' }).REPLICA_HOST).toBe('127.0.0.1');
  });

  it('half a pair, or a pair that is not one, naming the setting and the path', async () => {
    const base = { PATH: process.env.PATH, MIRROR_DB: at('leader.db'), REPLICA_API_KEY: REPLICA_KEY };
    const half = await runCli(['serve'], { ...base, REPLICA_TLS_CERT_FILE: at('replica.pem') });
    expect(half.code).toBe(2);
    expect(half.stderr).toContain(
      "REPLICA_TLS_KEY_FILE: is required when REPLICA_TLS_CERT_FILE is set (the replica's certificate and its key come as a pair)",
    );
    const mismatched = await runCli(['serve'], {
      ...base,
      REPLICA_TLS_CERT_FILE: at('replica.pem'),
      REPLICA_TLS_KEY_FILE: at('other-ca.key'),
    });
    expect(mismatched.code).toBe(2);
    expect(mismatched.stderr).toContain(
      `REPLICA_TLS_KEY_FILE: ${at('other-ca.key')}: is not the key of the certificate in REPLICA_TLS_CERT_FILE`,
    );
    const missing = await runCli(['serve'], { ...base, REPLICA_TLS_CERT_FILE: at('nowhere.pem'), REPLICA_TLS_KEY_FILE: at('replica.key') });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`REPLICA_TLS_CERT_FILE: ${at('nowhere.pem')}: cannot be read (ENOENT)`);
    expect(missing.stderr).not.toContain('PRIVATE KEY');
  });

  it('SERVICE_BASE_URL, MANAGEMENT_URL and WEBHOOK_URL as plain http: to another host; https: and loopback accepted', async () => {
    const webhook = (url: string, extra: Record<string, string> = {}) =>
      daemon({ ...onLoopback, WEBHOOK_URL: url, WEBHOOK_SECRET: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==', ...extra });
    for (const [url, host] of [
      ['http://10.1.2.3/in', '10.1.2.3'],
      ['http://hooks.internal/in', 'hooks.internal'],
    ] as const) {
      expect(problemsOf(() => webhook(url))).toEqual([
        `WEBHOOK_URL: plain http: to ${host}, beyond this host, would carry health data and keys in clear; use https:, or TLS_BY_PROXY=1 when a TLS proxy carries it`,
      ]);
      expect(webhook(url, { TLS_BY_PROXY: '1' }).WEBHOOK_URL).toBe(url);
    }
    expect(webhook('https://hooks.internal/in').WEBHOOK_URL).toBe('https://hooks.internal/in');
    expect(webhook('http://127.0.0.1:9/in').WEBHOOK_URL).toBe('http://127.0.0.1:9/in');

    expect(
      problemsOf(() =>
        daemon({ SERVICE_BASE_URL: 'http://leader.internal:8788', MANAGEMENT_URL: 'http://10.0.0.9', MANAGEMENT_KEY: 'mk' }),
      ),
    ).toEqual([
      expect.stringMatching(/^SERVICE_BASE_URL: plain http: to leader\.internal, beyond this host/),
      expect.stringMatching(/^MANAGEMENT_URL: plain http: to 10\.0\.0\.9, beyond this host/),
    ]);
    const worker = (env: Record<string, string>) => new ConfigPass(MANAGEMENT_CLIENT_ENV, env, quiet).done();
    expect(problemsOf(() => worker({ MANAGEMENT_URL: 'http://mgmt.internal', MANAGEMENT_KEY: 'mk' }))).toEqual([
      expect.stringMatching(/^MANAGEMENT_URL: plain http: to mgmt\.internal/),
    ]);
    expect(worker({ MANAGEMENT_URL: 'http://mgmt.internal', MANAGEMENT_KEY: 'mk', TLS_BY_PROXY: 'yes' }).MANAGEMENT_URL).toBe(
      'http://mgmt.internal',
    );

    // The CLI: exit 2 before anything is sent (the host does not exist; nothing resolves it).
    const sync = await runCli(
      ['sync', '--once'],
      keysAsFiles(
        {
          PATH: process.env.PATH ?? '',
          SERVICE_BASE_URL: 'http://leader.internal:8788',
          SERVICE_API_KEY: REPLICA_KEY,
          MIRROR_DB: at('never.db'),
        },
        at('never-keys'),
      ),
    );
    expect(sync.code).toBe(2);
    expect(sync.stderr).toContain('SERVICE_BASE_URL: plain http: to leader.internal, beyond this host');
  });
});

describe("the daemon's replica (REPLICA_PORT) on https", () => {
  it('serves the certificate from the files, and its end is on the status /metrics too', async () => {
    const redis = await startTestRedis();
    const replicaPort = await freePort();
    const statusPort = await freePort();
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb: at('daemon.db'),
      queuePrefix: `tls${Date.now()}`,
      statusPort,
      extra: {
        REPLICA_PORT: String(replicaPort),
        REPLICA_API_KEY: REPLICA_KEY,
        REPLICA_TLS_CERT_FILE: at('replica.pem'),
        REPLICA_TLS_KEY_FILE: at('replica.key'),
      },
    });
    const daemon = spawnDaemon(env);
    try {
      await daemon.ready;
      expect(await servedSerial(replicaPort)).toBe(serialOf('replica.pem'));
      const validTo = new X509Certificate(readFileSync(at('replica.pem'))).validToDate.getTime() / 1000;
      expect(gauge(await metrics(replicaPort), 'user_mirror_replica_tls_valid_to_seconds')).toBe(validTo);
      const status = await (await fetch(`http://127.0.0.1:${statusPort}/metrics`)).text();
      expect(gauge(status, 'user_mirror_replica_tls_valid_to_seconds')).toBe(validTo);
      expect((await daemon.stop('SIGTERM')).code).toBe(0);
    } finally {
      await daemon.stop('SIGKILL').catch(() => undefined);
      await redis.stop();
    }
  }, 120_000);
});
