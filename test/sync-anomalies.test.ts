/**
 * Anomalies are facts on the run: a listing that names one user_id under two
 * client_user_ids, or one client_user_id for two users, a page larger than
 * the limit, a `total` that collapses late in the scan. Each is counted on
 * the run's row, shown by `status`, and logged at warn with its ids; the
 * later listing wins a conflict, and a collapsed listing deletes nothing.
 * Real `sync --once` and `status` processes against a small HTTP server that
 * serves the odd listings the stand-in never would.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './support/daemon-process.js';
import { tempDir, userId, wireUser, type TempDir, type WireRecord } from './support/mirror-fixtures.js';

/** The server echoes this page size, below the sync's 500, so a directory of 100 users is 10 pages. */
const PAGE = 10;
const USERS = 100;

interface Listing {
  /** Records at this offset, as served. */
  page: (offset: number) => WireRecord[];
  /** `total` on the page at this offset. */
  total: (offset: number) => number;
}

const plain: Listing = {
  page: (offset) => range(offset, Math.min(offset + PAGE, USERS)).map((n) => wireUser(n)),
  total: () => USERS,
};

/**
 * The odd listing, read in page order (SYNC_CONCURRENCY=1, so "later" is deterministic):
 * user 5 on page 0 as client-5 and again on page 30 as client-5-renamed; user 7 changed on
 * page 0, then a new user 200 claiming client-7 on page 50; pages 30, 40 and 50 carry 11 records;
 * from page 90 on, `total` is 0 and the pages are empty (users 90-99 go unlisted).
 */
const odd: Listing = {
  page: (offset) => {
    if (offset >= 90) return [];
    const users = plain.page(offset).map((u, i) => (offset + i === 7 ? { ...u, created_on: '2023-01-01T00:00:00Z' } : u));
    if (offset === 30) users.push(wireUser(5, { client_user_id: 'client-5-renamed' }));
    if (offset === 40) users.push(wireUser(150));
    if (offset === 50) users.push(wireUser(200, { client_user_id: 'client-7' }));
    return users;
  },
  total: (offset) => (offset >= 90 ? 0 : USERS),
};

let listing: Listing = plain;
let server: Server;
let baseUrl: string;
let dir: TempDir;

beforeAll(async () => {
  dir = tempDir('user-mirror-anomalies-');
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.headers['x-service-api-key'] !== 'k') return send(401, { detail: 'bad key' });
    const resolve = /^\/v2\/user\/resolve\/(.+)$/.exec(url.pathname);
    if (resolve !== null) {
      // Resolve answers from the plain directory: every user the odd listing left out is alive.
      const n = Number(/^client-(\d+)$/.exec(decodeURIComponent(resolve[1] ?? ''))?.[1] ?? NaN);
      return n >= 0 && n < USERS ? send(200, wireUser(n)) : send(404, { detail: 'not found' });
    }
    if (url.pathname === '/v2/user/' || url.pathname === '/v2/user') {
      const offset = Number(url.searchParams.get('offset') ?? 0);
      return send(200, { users: listing.page(offset), total: listing.total(offset), offset, limit: PAGE });
    }
    send(404, { detail: 'no route' });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  dir?.remove();
});

type RunRow = {
  status: string;
  identity_conflicts: number;
  oversize_pages: number;
  total_lowest: number | null;
  error: string | null;
  deleted: number;
};

function lastRun(path: string): RunRow {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare(`SELECT status, identity_conflicts, oversize_pages, total_lowest, error, deleted FROM sync_runs ORDER BY id DESC LIMIT 1`)
      .get() as RunRow;
  } finally {
    db.close();
  }
}

function activeClientOf(path: string, user: string): string | undefined {
  const db = new Database(path, { readonly: true });
  try {
    const row = db.prepare(`SELECT client_user_id FROM users WHERE user_id = ? AND deleted_at IS NULL`).get(user) as
      { client_user_id: string } | undefined;
    return row?.client_user_id;
  } finally {
    db.close();
  }
}

/** The sync's log lines (pino JSON on stdout) with this event. */
function events(stdout: string, event: string): Array<Record<string, unknown>> {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.event === event);
}

const WARN = 40;

describe('anomalies of a listing', () => {
  const env = (mirror: string) => ({
    SERVICE_BASE_URL: baseUrl,
    SERVICE_API_KEY: 'k',
    MIRROR_DB: mirror,
    SYNC_CONCURRENCY: '1',
    LOG_LEVEL: 'info',
  });

  it('on a re-sync: counted on the run, logged at warn with ids, shown by status; the later listing wins; a collapse deletes nothing', async () => {
    const mirror = `${dir.path}/resync.db`;
    listing = plain;
    expect((await runCli(['sync', '--once'], env(mirror), 60_000)).code).toBe(0);
    expect(lastRun(mirror)).toMatchObject({ status: 'succeeded', identity_conflicts: 0, oversize_pages: 0, total_lowest: USERS });

    listing = odd;
    const run = await runCli(['sync', '--once'], env(mirror), 60_000);
    const row = lastRun(mirror);
    expect(row).toMatchObject({ status: 'partial', identity_conflicts: 2, oversize_pages: 3, total_lowest: 0, deleted: 1 });
    expect(row.error).toMatch(/total fell from 100 to 0 during the scan/);
    // The later listing holds each identity; the only deletion is the superseded holder of client-7.
    expect(activeClientOf(mirror, userId(5))).toBe('client-5-renamed');
    expect(activeClientOf(mirror, userId(200))).toBe('client-7');
    expect(activeClientOf(mirror, userId(7))).toBeUndefined();
    for (const n of [90, 95, 99]) expect(activeClientOf(mirror, userId(n))).toBe(`client-${n}`);

    const conflicts = events(run.stdout, 'sync.identity_conflict');
    expect(conflicts.every((c) => c.level === WARN)).toBe(true);
    expect(conflicts).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: 'user_id', userId: userId(5), earlier: 'client-5', later: 'client-5-renamed' }),
        expect.objectContaining({ kind: 'client_user_id', clientUserId: 'client-7', earlier: userId(7), later: userId(200) }),
      ]),
    );
    expect(events(run.stdout, 'sync.oversize_page').map((e) => [e.level, e.offset, e.records])).toEqual([
      [WARN, 30, 11],
      [WARN, 40, 11],
      [WARN, 50, 11],
    ]);
    expect(events(run.stdout, 'sync.total_collapsed')).toEqual([
      expect.objectContaining({ level: WARN, totalAtStart: 100, totalLowest: 0, totalAtEnd: 0 }),
    ]);

    const status = await runCli(['status'], { MIRROR_DB: mirror }, 30_000);
    expect(status.stdout).toMatch(
      /ANOMALIES 2 identity conflict\(s\) .*; 3 page\(s\) larger than the limit asked; total fell from 100 to 0 during the scan/,
    );
    const json = JSON.parse((await runCli(['status', '--json'], { MIRROR_DB: mirror }, 30_000)).stdout) as {
      mirror: { lastRuns: Array<{ anomalies: unknown }> };
    };
    expect(json.mirror.lastRuns[0]?.anomalies).toEqual({ identityConflicts: 2, oversizePages: 3, totalLowest: 0 });
  });

  it('on a first sync into an empty mirror: the same conflicts found by the bulk load', async () => {
    const mirror = `${dir.path}/first.db`;
    listing = odd;
    const run = await runCli(['sync', '--once'], env(mirror), 60_000);
    expect(lastRun(mirror)).toMatchObject({ status: 'partial', identity_conflicts: 2, oversize_pages: 3, total_lowest: 0 });
    expect(activeClientOf(mirror, userId(5))).toBe('client-5-renamed');
    expect(activeClientOf(mirror, userId(200))).toBe('client-7');
    expect(events(run.stdout, 'sync.identity_conflict').map((c) => c.kind)).toEqual(expect.arrayContaining(['user_id', 'client_user_id']));
  });
});

function range(from: number, to: number): number[] {
  return Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);
}
