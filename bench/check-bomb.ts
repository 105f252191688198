/**
 * Peak RSS of a `sync --once` process whose every deletion check is answered
 * with a decompression bomb (issue 40): 1 GiB of gzip-compressed spaces
 * (~1 MB on the wire) per resolve answer.
 *
 * A local server lists 2,000 users for a first run, then all but 1,000 of
 * them, so the second run checks 1,000 candidates upstream (SYNC_MAX_VERIFY
 * and SYNC_MAX_DELETE_RATIO opened wide); every check gets the bomb. The
 * second run is measured with /usr/bin/time (its maximum resident set), at
 * each SYNC_VERIFY_CONCURRENCY and SYNC_MAX_RESOLVE_BYTES given below: the
 * default bound (256 KiB), and 32 MiB, the page bound that applied to
 * resolve answers before they had a bound of their own.
 *
 *   npm run bench:check-bomb [-- --concurrency 16,64,256] [--bounds 262144] [--answer gone]
 *
 * `--answer gone` answers every check 404 instead (no bomb; the users are
 * deleted): the same run without the bomb, for comparison.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createGzip } from 'node:zlib';

const CLI = fileURLToPath(new URL('../cli.js', import.meta.url));
const TEAM = randomUUID();
const USERS = 2_000;
const KEPT = 1_000;

const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '16,64' },
    bounds: { type: 'string', default: '262144,33554432' },
    // `gone`: every check answered 404, no bomb: the same run's baseline.
    answer: { type: 'string', default: 'bomb' },
  },
});
const concurrencies = values.concurrency.split(',').map(Number);
const bounds = values.bounds.split(',').map(Number);

/** 1 GiB of spaces, gzipped once, streamed: the bench never holds the GiB. */
async function gzipBomb(bytes: number): Promise<Buffer> {
  const gzip = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gzip.on('data', (c: Buffer) => out.push(c));
  const done = new Promise<void>((resolve) => gzip.on('end', resolve));
  const chunk = Buffer.alloc(1024 * 1024, 0x20);
  for (let i = 0; i < bytes / chunk.length; i++) {
    if (!gzip.write(chunk)) await new Promise((resolve) => gzip.once('drain', resolve));
  }
  gzip.end();
  await done;
  return Buffer.concat(out);
}

function user(n: number): Record<string, unknown> {
  return {
    user_id: ids[n],
    team_id: TEAM,
    client_user_id: `client-${n}`,
    created_on: '2026-01-12T12:39:40Z',
    connected_sources: [],
    fallback_time_zone: null,
  };
}
const ids = Array.from({ length: USERS }, () => randomUUID());

async function main(): Promise<void> {
  const bomb = await gzipBomb(1024 * 1024 * 1024);
  let listed = USERS;
  let resolves = 0;
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname.startsWith('/v2/user/resolve/')) {
      resolves++;
      if (values.answer === 'gone') {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"detail":"Not Found"}');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(bomb);
      return;
    }
    const offset = Number(url.searchParams.get('offset') ?? 0);
    const limit = Number(url.searchParams.get('limit') ?? 100);
    const users = [];
    for (let i = offset; i < Math.min(listed, offset + limit); i++) users.push(user(i));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ users, total: listed, offset, limit }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-check-bomb-'));

  const run = (db: string, extra: Record<string, string>) =>
    new Promise<{ code: number | null; maxRssKb: number; out: string }>((resolve) => {
      const child = spawn('/usr/bin/time', ['-f', 'MAXRSS %M', process.execPath, CLI, 'sync', '--once'], {
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          ENV_FILE: '/dev/null',
          SERVICE_BASE_URL: baseUrl,
          SERVICE_API_KEY: 'sk_bench',
          MIRROR_DB: db,
          SYNC_MAX_DELETE_RATIO: '1',
          SYNC_MAX_VERIFY: String(USERS),
          ...extra,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.on('exit', (code) => resolve({ code, maxRssKb: Number(/MAXRSS (\d+)/.exec(err)?.[1] ?? NaN), out }));
    });

  const rows: string[] = [];
  for (const bound of bounds) {
    for (const concurrency of concurrencies) {
      const db = join(dir, `m-${bound}-${concurrency}.db`);
      listed = USERS;
      const first = await run(db, {});
      if (first.code !== 0) throw new Error(`first sync exited ${first.code}: ${first.out.slice(-2000)}`);
      listed = KEPT;
      resolves = 0;
      const env = { SYNC_VERIFY_CONCURRENCY: String(concurrency), SYNC_MAX_RESOLVE_BYTES: String(bound) };
      const second = await run(db, env);
      const check = /"event":"sync.deletion_check"[^\n]*/.exec(second.out)?.[0] ?? '';
      const unverified = /"unverified":(\d+)/.exec(check)?.[1] ?? '?';
      rows.push(
        `| ${concurrency} | ${bound === 262144 ? '256 KiB (default)' : `${bound / 1024 / 1024} MiB`} | ${(second.maxRssKb / 1024).toFixed(0)} | ${second.code} | ${resolves} | ${unverified} |`,
      );
      console.error(rows.at(-1));
    }
  }
  server.close();
  rmSync(dir, { recursive: true, force: true });
  console.log(
    `\nDeletion checks answered with ${values.answer === 'gone' ? '404 (no bomb)' : 'a 1 GiB gzip bomb'} (a bomb is ${(bomb.length / 1024).toFixed(0)} KiB on the wire), ${USERS - KEPT} candidates; Node ${process.version}\n`,
  );
  console.log('| SYNC_VERIFY_CONCURRENCY | SYNC_MAX_RESOLVE_BYTES | peak RSS (MB) | exit | resolves served | unverified |');
  console.log('|---:|---|---:|---:|---:|---:|');
  for (const r of rows) console.log(r);
}

await main();
