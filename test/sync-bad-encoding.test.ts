/**
 * Issue 40: a page answered with a Content-Encoding the client refuses (an
 * unknown `compress`, a bare `deflate` it did not ask for) once left the
 * response body unread and undestroyed; the pool's close then never settled,
 * so the daemon's sync process never exited (later ticks queued behind it)
 * and `sync --once` exited 0 with its run recorded `failed`.
 *
 * Against real parts: a small HTTP server that answers with the bad
 * encoding, a real redis-server, the daemon and `sync --once` as processes.
 * The sync process's supervision (a child that outlives its run is killed)
 * is shown with stand-in children: the real one no longer lingers. Needs
 * `npm run build` first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/runtime/log.js';
import { syncInChildProcess } from '../src/sync/child-process.js';
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess, type LogLine } from './support/daemon-process.js';
import { requireBuiltCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';

beforeAll(() => requireBuiltCli('src/commands/sync.js', 'src/sync/child-main.js'));

/** Answers every request with 8 MB under `encoding`: far more than socket buffers hold, so the body is in flight when refused. */
async function badEncodingServer(encoding: string): Promise<{ url: string; server: Server; requests: () => number }> {
  let requests = 0;
  const body = Buffer.alloc(8 * 1024 * 1024, 0x41);
  const server = createServer((_req, res) => {
    requests++;
    res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': encoding });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, requests: () => requests };
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-bad-encoding-'));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const CASES = [
  ['compress', /Content-Encoding 'compress' is not one this client can decode/],
  ['deflate', /Content-Encoding 'deflate' was not asked for/],
  ['x-proxy-mistake', /Content-Encoding 'x-proxy-mistake' is not one this client can decode/],
] as const;

describe('sync --once against a refused Content-Encoding', () => {
  for (const [encoding, reason] of CASES) {
    it(`exits 1, naming the encoding (${encoding}), with its run recorded failed`, async () => {
      const s = await badEncodingServer(encoding);
      try {
        const r = await runCli(['sync', '--once'], {
          SERVICE_BASE_URL: s.url,
          SERVICE_API_KEY: 'sk_test',
          MIRROR_DB: join(dir, `once-${encoding}.db`),
        });
        expect(r.code, r.stderr).toBe(1);
        expect(r.stdout).toMatch(reason);
        expect(r.stdout).toContain('"status":"failed"');
        // The client closed: the WAL checkpoint after the run ran (the process got past its close).
        expect(r.stdout).toContain('"event":"sync.checkpoint"');
      } finally {
        s.server.close();
      }
    });
  }
});

describe("the daemon's sync process after a refused Content-Encoding", () => {
  let redis: TestRedis;
  let daemon: DaemonProcess | undefined;
  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await daemon?.stop('SIGKILL').catch(() => undefined);
    await redis?.stop();
  });

  for (const [encoding, reason] of CASES.slice(0, 2)) {
    it(`exits after each failed run (${encoding}), and the next ticks run`, async () => {
      const s = await badEncodingServer(encoding);
      try {
        const service = {
          baseUrl: s.url,
          apiKey: 'sk_test',
          apiKeyHeader: 'x-service-api-key',
          managementUrl: s.url,
          managementKey: 'mg_x',
        };
        daemon = spawnDaemon(
          daemonEnv({
            redisUrl: redis.url,
            standIn: service,
            mirrorDb: join(dir, `daemon-${encoding}.db`),
            queuePrefix: `enc-${encoding}`,
            statusPort: await freePort(),
            extra: { LOG_LEVEL: 'debug', SYNC_MAX_DURATION_MS: '15000' },
          }),
        );
        await daemon.ready;
        const d = daemon;
        const failed = (l: LogLine) => l.event === 'sync.finished' && l.status === 'failed' && reason.test(String(l.reason));
        const exits = () => d.logs.filter((l) => l.event === 'sync.process_exited');
        // Three runs in a row, each failed and each followed by its process's exit: no run is left holding the next.
        await eventually(
          () => d.logs.filter(failed).length >= 3 && exits().length >= 3,
          90_000,
          () => `three failed runs, each exited: ${d.text()}`,
        );
        for (const e of exits().slice(0, 3)) {
          expect(e.code).toBe(0);
          expect(typeof e.afterResultMs).toBe('number');
        }
        // Each exited by itself: neither the process's own guard nor the daemon's kill was needed.
        expect(d.logs.filter((l) => l.event === 'sync.process_lingered' || l.event === 'sync.process_killed')).toEqual([]);
        expect(s.requests()).toBeGreaterThanOrEqual(3);
        const stopped = await d.stop('SIGTERM');
        expect(stopped.code).toBe(0);
        daemon = undefined;
      } finally {
        s.server.close();
      }
    });
  }
});

describe("the daemon's supervision of a sync process that outlives its run", () => {
  /** A stand-in for child-main.js: `script` runs with the IPC channel open. */
  function child(name: string, script: string): string {
    const path = join(dir, `${name}.mjs`);
    writeFileSync(path, script);
    return path;
  }
  const DONE = `{ type: 'done', outcome: { ran: false, heldBy: { holder: 'x', host: 'h', pid: 1, acquiredAt: 0, expiresAt: 0 } } }`;

  function capture(): { logger: ReturnType<typeof createLogger>; lines: LogLine[] } {
    const lines: LogLine[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as LogLine);
        cb();
      },
    });
    return { logger: createLogger({ LOG_LEVEL: 'debug' }, sink), lines };
  }
  const job = { reason: 'test', tick: '2026-01-01T00:00:00.000Z' };

  it('kills a child still alive after reporting its result; the result stands', async () => {
    const { logger, lines } = capture();
    // Reports, then stays alive by a timer and the open channel, as the wedged sync did.
    const childMain = child('lingers', `process.send(${DONE}); setInterval(() => undefined, 1000);`);
    const run = syncInChildProcess({ childMain, exitWithinMs: 1_000, killAfterMs: 1_000, logger });
    const outcome = await run(new AbortController().signal, job);
    expect(outcome.ran).toBe(false);
    expect(lines.find((l) => l.event === 'sync.process_killed')).toMatchObject({ afterMs: 1_000 });
    expect(lines.find((l) => l.event === 'sync.process_exited')).toMatchObject({ signal: 'SIGKILL' });
  });

  it('stops a child that never reports past its run deadline: asked, then killed; the job fails', async () => {
    const { logger, lines } = capture();
    // Ignores the abort message and SIGTERM alike.
    const childMain = child(
      'wedged',
      `process.on('message', () => undefined); process.on('SIGTERM', () => undefined); setInterval(() => undefined, 1000);`,
    );
    const run = syncInChildProcess({ childMain, maxRunMs: 1_500, killAfterMs: 1_000, logger });
    await expect(run(new AbortController().signal, job)).rejects.toThrow(
      /still running 1500 ms after it started \(past SYNC_MAX_DURATION_MS\)/,
    );
    expect(lines.map((l) => l.event)).toEqual(
      expect.arrayContaining(['sync.process_overran', 'sync.process_killed', 'sync.process_exited']),
    );
  });
});
