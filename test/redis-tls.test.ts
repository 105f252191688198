/**
 * TLS to Redis with a private CA, a client certificate and a server name:
 * the test makes a CA, a server certificate for `redis.internal` (not for the
 * address connected to) and a client certificate with `openssl`, starts
 * `redis-server --tls-port` with them (client certificates required, Redis's
 * default `tls-auth-clients yes`), and runs the daemon and the CLI through
 * it with REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE and
 * REDIS_TLS_SERVERNAME. What an operator sees without the certificate, with
 * the wrong name, and with files that cannot be used, is shown too.
 *
 * A Redis built without TLS cannot serve these: the tests then say NOT RUN
 * in their names, and the reason.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { ROOT, daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';
import { durableNodeArgs, launchRedis, stopAll, type RedisProcess } from './support/redis-process.js';

/** Why TLS tests cannot run here, or undefined when they can: a TLS-less build refuses the tls-port directive. */
function tlsMissing(): string | undefined {
  const probe = spawnSync('redis-server', ['--port', '0', '--tls-port', '0', '--tls-cert-file', '/nonexistent'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (probe.error !== undefined) return `redis-server cannot run (${probe.error.message})`;
  const out = `${probe.stdout}${probe.stderr}`;
  if (/Bad directive|not compiled|TLS is not|unsupported/i.test(out)) return 'this redis-server was built without TLS';
  if (spawnSync('openssl', ['version']).status !== 0) return 'openssl is not on PATH';
  return undefined;
}

const missing = tlsMissing();
const name = (what: string): string => (missing === undefined ? what : `NOT RUN (${missing}): ${what}`);
const maybe = missing === undefined ? it : it.skip;

let dir: string;
let redis: RedisProcess | undefined;
let tlsPort = 0;
let standIn: StandIn;
let daemon: DaemonProcess | undefined;

/**
 * The CA, the server certificate (for redis.internal only) and the client certificate, made by the
 * `openssl` lines of docs/removals.md's TLS recipe, run as written.
 */
function makeCertificates(): void {
  const doc = readFileSync(join(ROOT, 'docs', 'removals.md'), 'utf8');
  const recipe = doc.split('\n').filter((l) => l.startsWith('openssl '));
  if (recipe.length !== 5) throw new Error(`docs/removals.md: expected the TLS recipe's 5 openssl lines, found ${recipe.length}`);
  for (const line of recipe) execFileSync('sh', ['-c', line], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  chmodSync(join(dir, 'client.key'), 0o600);
}

beforeAll(async () => {
  if (missing !== undefined) return;
  dir = mkdtempSync(join(tmpdir(), 'redis-tls-'));
  makeCertificates();
  redis = await launchRedis('tls', async (port, d) => {
    tlsPort = await freePort();
    // The plain port answers only the harness's PING; everything the project sends goes to the TLS port.
    return [
      ...durableNodeArgs(port, d),
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      join(dir, 'redis.pem'),
      '--tls-key-file',
      join(dir, 'redis.key'),
      '--tls-ca-cert-file',
      join(dir, 'ca.pem'),
    ];
  });
  standIn = await startStandIn({ port: 0, users: 50, seed: 9 });
}, 60_000);

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  if (redis !== undefined) await stopAll([redis]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The TLS variables as an operator sets them, every file by path. */
function tlsEnv(overrides: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string | undefined> = {
    REDIS_TLS_CA_FILE: join(dir, 'ca.pem'),
    REDIS_TLS_CERT_FILE: join(dir, 'client.pem'),
    REDIS_TLS_KEY_FILE: join(dir, 'client.key'),
    REDIS_TLS_SERVERNAME: 'redis.internal',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}

async function envFor(prefix: string, tls: Record<string, string>, url = `rediss://127.0.0.1:${tlsPort}`): Promise<Record<string, string>> {
  return daemonEnv({
    redisUrl: url,
    standIn,
    mirrorDb: join(dir, `${prefix}.db`),
    queuePrefix: prefix,
    mirrorId: prefix,
    statusPort: await freePort(),
    cron: '*/5 * * * * *',
    extra: { SYNC_STALE_AFTER_MS: '600000', ...tls },
  });
}

describe('TLS to Redis (redis-server --tls-port, client certificates required)', () => {
  maybe(
    name(
      'the daemon syncs on its schedule and removes a member, and status reads the queues, over TLS with a private CA, a client certificate and REDIS_TLS_SERVERNAME',
    ),
    async () => {
      const env = await envFor('tls', tlsEnv());
      daemon = spawnDaemon(env);
      await daemon.ready;
      await daemon.waitForLog((l) => l.event === 'removals.redis_durability' && l.state === 'run', 30_000, 'the durability check over TLS');
      await daemon.waitForLog((l) => l.event === 'sync.finished' && l.status === 'succeeded', 30_000, 'a scheduled sync');
      const member = standIn.members.list()[0];
      if (member === undefined) throw new Error('the stand-in has no members');
      const removal = await runCli(['remove-member', member.orgId, member.memberId, '--wait', '--timeout', '60'], env, 90_000);
      expect(removal.code, `${removal.stdout}\n${removal.stderr}`).toBe(0);
      const status = await runCli(['status', '--json'], env, 60_000);
      expect(status.code, `${status.stdout}\n${status.stderr}`).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ queues: { reachable: true } });
      expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
      daemon = undefined;
    },
    180_000,
  );

  maybe(
    name('without the client certificate Redis refuses the connection: status exits 1 and says Redis is unreachable'),
    async () => {
      const env = await envFor('nocert', tlsEnv({ REDIS_TLS_CERT_FILE: undefined, REDIS_TLS_KEY_FILE: undefined }));
      const status = await runCli(['status'], env, 60_000);
      expect(status.code, `${status.stdout}\n${status.stderr}`).toBe(1);
      expect(status.stdout).toMatch(/redis unreachable/);
    },
    90_000,
  );

  maybe(
    name('with a REDIS_TLS_SERVERNAME the certificate does not carry, the server is not trusted: status exits 1 naming the name'),
    async () => {
      const env = await envFor('wrongname', tlsEnv({ REDIS_TLS_SERVERNAME: 'other.test' }));
      const status = await runCli(['status'], env, 60_000);
      expect(status.code, `${status.stdout}\n${status.stderr}`).toBe(1);
      expect(status.stdout).toMatch(/redis unreachable.*other\.test/);
      // Without a server name the address connected to (127.0.0.1) is checked, and is not in the certificate either.
      const bare = await runCli(['status'], await envFor('noname', tlsEnv({ REDIS_TLS_SERVERNAME: undefined })), 60_000);
      expect(bare.code).toBe(1);
      expect(bare.stdout).toMatch(/redis unreachable.*127\.0\.0\.1/);
    },
    90_000,
  );

  maybe(
    name('files that cannot be used, and TLS variables without TLS, are configuration errors naming the variable and never the key'),
    async () => {
      const nofile = await runCli(
        ['status'],
        await envFor('badfiles', tlsEnv({ REDIS_TLS_CA_FILE: join(dir, 'missing.pem'), REDIS_TLS_CERT_FILE: join(dir, 'client.key') })),
        60_000,
      );
      expect(nofile.code).toBe(2);
      expect(nofile.stderr).toContain(`REDIS_TLS_CA_FILE: ${join(dir, 'missing.pem')}: cannot be read (ENOENT)`);
      expect(nofile.stderr).toContain(`REDIS_TLS_CERT_FILE: ${join(dir, 'client.key')}: is not a PEM file holding a CERTIFICATE`);
      expect(nofile.stderr).not.toContain('PRIVATE KEY-----');

      const plain = await runCli(['status'], await envFor('plain', tlsEnv(), `redis://127.0.0.1:${redis?.port ?? 0}`), 60_000);
      expect(plain.code).toBe(2);
      expect(plain.stderr).toContain('REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE, REDIS_TLS_KEY, REDIS_TLS_SERVERNAME: only with TLS on');

      const half = await runCli(['status'], await envFor('half', tlsEnv({ REDIS_TLS_KEY_FILE: undefined })), 60_000);
      expect(half.code).toBe(2);
      expect(half.stderr).toContain('a client certificate needs its key');
    },
    90_000,
  );
});
