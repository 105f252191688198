/**
 * A follower trusts one leader, on every answer (issue 50, broke 1-4;
 * docs/followers.md). Real processes of the built CLI: leader mirrors synced
 * from stand-ins, each served by `user-mirror serve`, and a follower's
 * `sync --once` reading them through a proxy in this test that switches
 * leaders mid-scan, sends the deletion checks elsewhere, strips the
 * x-mirror-* headers, or alternates between two leaders.
 *
 * - leader A: the stand-in's 1,200 users;
 * - leader R: a `restore` of A's backup taken at 1,000 users (another epoch,
 *   a restore marker), later synced again (same data as A, other epoch);
 * - leader T: another team's mirror (another stand-in).
 *
 * Each refused run: `failed`, no user deleted or added, no change event, and
 * `status` exits 1 naming why. Needs `npm run build` first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli, startCli, type CliProcess } from './support/cli-process.js';
import { keysAsFiles } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';

const REPLICA_KEY = 'rk_leader_pin_test_key';
const HOUR = '3600000';

type Leader = 'A' | 'R' | 'T';
/** Which leader the proxy sends a request to: by its path and how many requests came before it. */
type Route = (path: string, n: number) => Leader;

let standIn: StandIn;
let otherTeam: StandIn;
let dir: string;
const serves: CliProcess[] = [];
const ports: Record<Leader, number> = { A: 0, R: 0, T: 0 };
let proxy: Server;
let proxyPort: number;
let route: Route = () => 'A';
let strip = false;
let requests = 0;
const path = (name: string) => join(dir, `${name}.db`);

function serviceEnv(s: StandIn, name: string): Record<string, string> {
  const env = {
    PATH: process.env.PATH ?? '',
    SERVICE_BASE_URL: s.baseUrl,
    SERVICE_API_KEY: s.apiKey,
    SERVICE_API_KEY_HEADER: s.apiKeyHeader,
    MIRROR_DB: path(name),
    LOG_LEVEL: 'warn',
  };
  return keysAsFiles(env, join(dir, `${name}-keys`));
}

function followerEnv(extra: Record<string, string> = {}, port = proxyPort): Record<string, string> {
  const env = {
    PATH: process.env.PATH ?? '',
    SERVICE_BASE_URL: `http://127.0.0.1:${port}`,
    SERVICE_API_KEY: REPLICA_KEY,
    MIRROR_DB: path('follower'),
    SYNC_FOLLOW_LEADER: '1',
    // One page at a time: the proxy's request count is the order of the scan.
    SYNC_CONCURRENCY: '1',
    SYNC_VERIFY_CONCURRENCY: '1',
    SYNC_LEADER_MAX_AGE_MS: HOUR,
    SYNC_STALE_AFTER_MS: HOUR,
    LOG_LEVEL: 'info',
    ...extra,
  };
  return keysAsFiles(env, join(dir, 'follower-keys'));
}

async function cli(args: string[], env: Record<string, string>) {
  return runCli(args, env, 180_000);
}

async function serve(leader: Leader, file: string): Promise<void> {
  ports[leader] = await freePort();
  const p = startCli(['serve'], {
    PATH: process.env.PATH,
    MIRROR_DB: path(file),
    REPLICA_API_KEY: REPLICA_KEY,
    REPLICA_PORT: String(ports[leader]),
  });
  serves.push(p);
  await p.line(/"event":"replica.listening"/, 60_000);
}

/** Forwards each request to the leader `route` picks; drops the x-mirror-* headers while `strip`. */
function forward(req: IncomingMessage, res: import('node:http').ServerResponse): void {
  const leader = route(req.url ?? '/', requests++);
  const upstream = request(
    { host: '127.0.0.1', port: ports[leader], method: req.method, path: req.url, headers: req.headers },
    (answer) => {
      const headers = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => !(strip && name.startsWith('x-mirror-'))));
      res.writeHead(answer.statusCode ?? 502, headers);
      answer.pipe(res);
    },
  );
  upstream.on('error', () => res.destroy());
  req.pipe(upstream);
}

interface Held {
  active: string[];
  deleted: number;
  events: number;
  versions: number;
  teams: string[];
}

/** What the follower holds and has published: its active users, deletions, change events and history rows. */
function held(): Held {
  const db = new Database(path('follower'), { readonly: true });
  try {
    const one = (sql: string) => db.prepare<[], { n: number }>(sql).get()?.n ?? 0;
    return {
      active: db
        .prepare<[], { u: string }>(`SELECT user_id AS u FROM users WHERE deleted_at IS NULL ORDER BY user_id`)
        .all()
        .map((r) => r.u),
      deleted: one(`SELECT count(*) AS n FROM users WHERE deleted_at IS NOT NULL`),
      events: one(`SELECT count(*) AS n FROM change_events`),
      versions: one(`SELECT count(*) AS n FROM user_versions`),
      teams: db
        .prepare<[], { t: string }>(`SELECT DISTINCT team_id AS t FROM users ORDER BY t`)
        .all()
        .map((r) => r.t),
    };
  } finally {
    db.close();
  }
}

function lastRun(): { status: string; error: string | null } {
  const db = new Database(path('follower'), { readonly: true });
  try {
    return (
      db.prepare<[], { status: string; error: string | null }>(`SELECT status, error FROM sync_runs ORDER BY id DESC LIMIT 1`).get() ?? {
        status: 'none',
        error: null,
      }
    );
  } finally {
    db.close();
  }
}

/** A list page's request: `/v2/user/?offset=…`. */
const LIST = /^\/v2\/user\/?\?/;

/** As in the issue's runs, the follower's next run lists the whole leader: its feed cursor is not used (the feed answered 410). */
function listWhole(): void {
  const db = new Database(path('follower'));
  try {
    db.exec(`UPDATE sync_runs SET source_cursor = NULL`);
  } finally {
    db.close();
  }
}

/** A follower run the pin must refuse: not 0, `failed`, nothing changed, and `status` exit 1 with the reason. */
async function expectRefused(reason: RegExp, env: Record<string, string> = followerEnv()): Promise<string> {
  const before = held();
  const r = await cli(['sync', '--once'], env);
  expect(r.code, r.stdout + r.stderr).not.toBe(0);
  expect(r.stdout + r.stderr).toMatch(reason);
  expect(lastRun()).toMatchObject({ status: 'failed', error: expect.stringMatching(reason) });
  expect(held()).toEqual(before);
  const status = await cli(['status'], env);
  expect(status.code, status.stdout).toBe(1);
  expect(status.stdout).toMatch(/LAST SYNC FAILED/);
  expect(status.stdout.replace(/\s+/g, ' ')).toMatch(reason);
  return r.stdout + r.stderr;
}

async function expectFollows(env: Record<string, string> = followerEnv()): Promise<string> {
  const r = await cli(['sync', '--once'], env);
  expect(r.code, r.stdout + r.stderr).toBe(0);
  expect(lastRun().status).toBe('succeeded');
  return r.stdout + r.stderr;
}

describe('a follower pinned to one leader and one team (issue 50)', () => {
  beforeAll(async () => {
    requireBuiltCli('src/commands/serve.js');
    standIn = await startStandIn({ users: 1_000, seed: 50, orgs: 0, membersPerOrg: 0 });
    otherTeam = await startStandIn({ users: 300, seed: 51, orgs: 0, membersPerOrg: 0 });
    expect(otherTeam.directory.teamId).not.toBe(standIn.directory.teamId);
    dir = mkdtempSync(join(tmpdir(), 'leader-pin-'));
    // Leader A at 1,000 users, backed up; then 200 more. R is A restored from that backup.
    expect((await cli(['sync', '--once'], serviceEnv(standIn, 'A'))).code).toBe(0);
    const backup = join(dir, 'A-backup.db');
    expect((await cli(['backup', backup], serviceEnv(standIn, 'A'))).code).toBe(0);
    standIn.directory.add(200);
    expect((await cli(['sync', '--once'], serviceEnv(standIn, 'A'))).code).toBe(0);
    const restored = await cli(['restore', backup], serviceEnv(standIn, 'R'));
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    expect((await cli(['sync', '--once'], serviceEnv(otherTeam, 'T'))).code).toBe(0);
    await Promise.all([serve('A', 'A'), serve('R', 'R'), serve('T', 'T')]);
    proxy = createServer(forward);
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    proxyPort = (proxy.address() as AddressInfo).port;
    // The follower's first run: all of leader A.
    await expectFollows();
    expect(held().active).toHaveLength(1_200);
  }, 300_000);

  afterAll(async () => {
    await new Promise((resolve) => proxy?.close(resolve));
    for (const p of serves) p.child.kill('SIGTERM');
    await Promise.all(serves.map((p) => p.exited(60_000)));
    await standIn?.close();
    await otherTeam?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('broke 1: the leader restored during the scan (later pages from the restored file) ends the run, nothing deleted', async () => {
    listWhole();
    // Page 0 and the page at 500 from A; the page at 1000 from the restored leader, which lists only 1,000 users.
    let listed = 0;
    route = (p) => (LIST.test(p) && ++listed > 2 ? 'R' : 'A');
    await expectRefused(
      /leader changed during the run: the list page at offset 1000 came from another leader .*epoch \w+ → \w+, restored at never → \S+/,
    );
    expect(held().active).toHaveLength(1_200);
  }, 300_000);

  it('broke 1: deletion checks answered by the restored leader (its 404s) end the run, nothing deleted', async () => {
    // Five users gone upstream, seen gone by A: the follower's candidates. Their resolves go to R.
    const gone = [...standIn.directory.records()].slice(1_100, 1_105).map((r) => String(r.user_id));
    standIn.directory.delete(gone);
    expect((await cli(['sync', '--once'], serviceEnv(standIn, 'A'))).code).toBe(0);
    listWhole();
    route = (p) => (p.startsWith('/v2/user/resolve/') ? 'R' : 'A');
    await expectRefused(/leader changed during the run: a deletion check's resolve \((?:found|404)\) came from another leader/);
    // Every answer from A: the five are deleted, the rest kept.
    route = () => 'A';
    await expectFollows();
    const h = held();
    expect(h.active).toHaveLength(1_195);
    expect(h.active.filter((u) => gone.includes(u))).toEqual([]);
    expect(h.deleted).toBe(5);
  }, 300_000);

  it('broke 4: a gateway that strips the x-mirror-* headers is refused (fail closed)', async () => {
    route = () => 'A';
    strip = true;
    try {
      await expectRefused(/carried no x-mirror-\* freshness headers: SYNC_FOLLOW_LEADER is set/);
    } finally {
      strip = false;
    }
    // And a mirror not configured as a follower, pointed at a replica, is refused rather than followed unchecked.
    await expectRefused(
      /answers as another mirror's replica \(x-mirror-\* headers\).*set SYNC_FOLLOW_LEADER=1/,
      followerEnv({ SYNC_FOLLOW_LEADER: '0' }),
    );
  }, 300_000);

  it("broke 2: another team's mirror as the leader is refused; no user of that team is stored", async () => {
    route = () => 'T';
    await expectRefused(
      new RegExp(
        `holds a user of team ${otherTeam.directory.teamId}, not of team ${standIn.directory.teamId} \\(from this mirror's users\\)`,
      ),
    );
    // An empty follower told its team refuses it too, from the first page.
    const fresh = { MIRROR_DB: path('empty-follower'), SYNC_FOLLOW_TEAM: standIn.directory.teamId };
    const r = await cli(['sync', '--once'], followerEnv(fresh));
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/not of team .* \(from SYNC_FOLLOW_TEAM\)/);
    const empty = new Database(path('empty-follower'), { readonly: true });
    expect(empty.prepare<[], { n: number }>(`SELECT count(*) AS n FROM users`).get()?.n).toBe(0);
    empty.close();
    expect(held().teams).toEqual([standIn.directory.teamId]);
    // Nor does `resolve --online` store another team's user through it.
    const foreign = String([...otherTeam.directory.records()][0]?.client_user_id);
    const online = await cli(['resolve', foreign, '--online'], followerEnv());
    expect(online.code, online.stderr).toBe(1);
    expect(online.stderr).toMatch(/neither printed nor stored: the leader's resolve answer holds a user of team \S+, not of team/);
    expect(held().teams).toEqual([standIn.directory.teamId]);
  }, 300_000);

  it('broke 3: two leaders (same data, other epochs) alternating behind one address: every run refused alike, none flips', async () => {
    // R syncs again: the same users as A, its own epoch, published after its restore.
    expect((await cli(['sync', '--once'], serviceEnv(standIn, 'R'))).code).toBe(0);
    listWhole();
    route = (_p, n) => (n % 2 === 0 ? 'A' : 'R');
    // Run 0 starts with A, run 1 with R.
    for (let run = 0; run < 2; run++) {
      requests = run;
      await expectRefused(/leader changed during the run: .* came from another leader than the run's first answer \(epoch \w+ → \w+/);
    }
    // One leader for a whole run is followed, whichever it is, in turn: a new epoch is logged and listed whole, never refused.
    route = () => 'A';
    expect(await expectFollows()).toMatch(/"event":"sync.leader_lineage"/);
    route = () => 'R';
    const out = await expectFollows();
    expect(out).toMatch(/"event":"sync.feed_fallback"/);
    expect(out).toMatch(/"event":"sync.leader_lineage"/);
    expect(held().active).toHaveLength(standIn.directory.size);
  }, 300_000);

  it('the leader down: the first request is retried within SYNC_PAGE_RETRY_BUDGET_MS, then exit 1 and status exit 1', async () => {
    const down = await freePort();
    const out = await expectRefused(
      /ECONNREFUSED|refused|connect/i,
      followerEnv({ SYNC_PAGE_ATTEMPTS: '2', SYNC_PAGE_RETRY_BUDGET_MS: '2000' }, down),
    );
    expect(out).toMatch(/"event":"sync.retry"/);
  }, 300_000);
});
