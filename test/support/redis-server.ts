/**
 * A Redis for tests: its own `redis-server` (from PATH) on a free port in a
 * temporary directory, stopped after the tests. By default it is configured
 * the way the removal queue requires in production (AOF with
 * `appendfsync always`, `maxmemory-policy noeviction`), so workers and
 * daemons start without ALLOW_VOLATILE_REDIS; `{ persistence: 'none' }`
 * gives the common volatile default (no RDB, no AOF) for tests of what
 * happens on such a Redis.
 *
 * The one rule for `REDIS_URL` in tests: it is ignored. Every test starts
 * the servers it uses, so a test may kill, restart or inspect them, and a
 * Redis the run did not start (the machine's own on 6379, a CI service) is
 * never written to. test/support/no-outside-redis.ts removes `REDIS_URL`
 * and its siblings from every test process's environment, so the children
 * the tests spawn do not inherit them either.
 *
 * No `redis-server` on PATH is an error that says what to do, never a
 * silent skip.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { busyMachineDeadline } from './eventually.js';

export interface TestRedis {
  url: string;
  port: number;
  /**
   * Restarts the server on the same port and directory. `keepData` saves
   * and reloads the dataset (a clean restart); otherwise the process is
   * SIGKILLed (a crash): with AOF it comes back with every acknowledged
   * write, without persistence it comes back empty. `downMs` is how long it
   * stays down.
   */
  restart(options?: { keepData?: boolean; downMs?: number }): Promise<void>;
  /** Kills the server (no save) and leaves it down until `restart`. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();

// A test process that dies must not leave Redis servers behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export interface TestRedisOptions {
  /**
   * 'aof' (default): appendonly yes, appendfsync always (no acknowledged write is ever lost).
   * 'aof-everysec': the production recommendation (benchmarks). 'none': no RDB, no AOF.
   */
  persistence?: 'aof' | 'aof-everysec' | 'none';
}

export async function startTestRedis(options: TestRedisOptions = {}): Promise<TestRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-redis-'));
  const port = await freePort();
  const persistence = PERSISTENCE[options.persistence ?? 'aof'];
  const launch = (p: number, d: string) => launchServer(p, d, persistence);
  let child: ChildProcess | undefined = await launch(port, dir);

  const down = async (signal: NodeJS.Signals): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill(signal);
    await exited;
    running.delete(c);
  };

  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async restart(options = {}) {
      if (child !== undefined) {
        if (options.keepData) {
          await command(port, 'SHUTDOWN SAVE').catch(() => undefined);
          await down('SIGKILL');
        } else {
          await down('SIGKILL');
        }
      }
      if (options.downMs) await sleep(options.downMs);
      child = await launch(port, dir);
    },
    async kill() {
      await down('SIGKILL');
    },
    async stop() {
      await down('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const PERSISTENCE = {
  aof: ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction'],
  'aof-everysec': ['--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction'],
  none: ['--save', '', '--appendonly', 'no'],
} as const;

async function launchServer(port: number, dir: string, persistence: readonly string[]): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', ...persistence, '--dir', dir, '--loglevel', 'warning', '--daemonize', 'no'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  running.add(child);
  child.once('exit', () => running.delete(child));

  const deadline = Date.now() + busyMachineDeadline(10_000);
  while (Date.now() < deadline) {
    const failed = await Promise.race([spawnError, sleep(50).then(() => undefined)]);
    if (failed !== undefined) {
      const missing = (failed as NodeJS.ErrnoException).code === 'ENOENT';
      throw new Error(
        missing
          ? 'redis-server is not on PATH: install Redis (e.g. apt-get install redis-server); tests start their own and ignore REDIS_URL'
          : `redis-server failed to start: ${failed.message}`,
      );
    }
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}: ${stderr.trim()}`);
    if ((await command(port, 'PING').catch(() => '')).startsWith('+PONG')) return child;
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server did not answer on port ${port} within ${busyMachineDeadline(10_000) / 1000} s: ${stderr.trim()}`);
}

/** One inline command over a raw socket: no client library, no reconnect noise. */
function command(port: number, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    let reply = '';
    socket.setTimeout(1_000, () => socket.destroy(new Error('timeout')));
    socket.once('connect', () => socket.write(`${line}\r\n`));
    socket.on('data', (d: Buffer) => {
      reply += d.toString();
      if (reply.includes('\r\n')) socket.end();
    });
    socket.once('close', () => resolve(reply));
    socket.once('error', reject);
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Every key of the Redis at `url` (a small test server's): what a command left behind. */
export async function redisKeys(url: string): Promise<string[]> {
  const { Redis } = await import('ioredis');
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    return await client.keys('*');
  } finally {
    client.disconnect();
  }
}
