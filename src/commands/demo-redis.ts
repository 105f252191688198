/**
 * The demo's Redis: one of its own when it can, so a demo never writes into a
 * Redis somebody else runs (the machine's shared one on 6379 answered, and
 * got a queue per run). In order:
 *
 * - REDIS_URL set: that Redis, said so before anything is written; the demo
 *   removes its queue afterwards;
 * - `redis-server` on the PATH: a private one on a free port, in a temporary
 *   folder, with AOF on (durable, as production wants), stopped and removed
 *   afterwards;
 * - neither: no Redis, and the removal steps are skipped with a note.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

export interface DemoRedis {
  url: string;
  /** Started by the demo: durable, and gone after it. */
  own: boolean;
  /** Stops an own server and removes its folder; a given Redis is left running. */
  close(): Promise<void>;
}

/** The Redis the demo uses, or undefined (with `why`) when there is none. */
export async function demoRedis(given: string | undefined): Promise<DemoRedis | { none: string }> {
  if (given !== undefined) {
    return (await answers(given)) ? { url: given, own: false, close: async () => undefined } : { none: `no Redis answered at REDIS_URL` };
  }
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-demo-redis-'));
  const port = await freePort();
  let child: ChildProcess;
  try {
    child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--save',
        '',
        '--maxmemory-policy',
        'noeviction',
      ],
      { stdio: 'ignore' },
    );
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return { none: 'no REDIS_URL, and no redis-server on the PATH to start one' };
  }
  const url = `redis://127.0.0.1:${port}`;
  const close = async (): Promise<void> => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 50; i++) {
    if (await answers(url)) return { url, own: true, close };
    await sleep(100);
  }
  await close();
  return { none: 'the redis-server the demo started did not answer' };
}

async function answers(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: 1_000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}
