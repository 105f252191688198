/**
 * Many hosts, one scan (docs/followers.md): a leader mirror syncs from the
 * stand-in and serves its replica (`user-mirror serve`); two followers sync
 * from that replica, each into its own file. All of them real processes of
 * the built CLI over HTTP. Rounds of churn through the stand-in's control API
 * (creations, updates, deletions, restores) leave the followers equal to the
 * leader; a stale leader makes the followers refuse it (nothing deleted) and
 * report stale (exit 1) naming the leader; a restored leader is noticed.
 * Needs `npm run build` first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { openMirror } from '../db/open.js';
import { MirrorReader } from '../db/mirror-reader.js';
import { createMetrics } from '../src/daemon/metrics.js';
import { mirrorFigures } from '../src/health/staleness.js';
import { requireBuiltCli, runCli, startCli, type CliProcess } from './support/cli-process.js';
import { keysAsFiles } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';

const REPLICA_KEY = 'rk_follow_chain_test_key';
const LEADER_MAX_AGE_MS = '60000';

let standIn: StandIn;
let dir: string;
let replicaPort: number;
let serve: CliProcess | undefined;
const path = (name: string) => join(dir, `${name}.db`);

function leaderEnv(): Record<string, string> {
  const env = {
    PATH: process.env.PATH ?? '',
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: path('leader'),
    LOG_LEVEL: 'info',
  };
  return keysAsFiles(env, join(dir, 'leader-keys'));
}

function followerEnv(name: string): Record<string, string> {
  const env = {
    PATH: process.env.PATH ?? '',
    SERVICE_BASE_URL: `http://127.0.0.1:${replicaPort}`,
    SERVICE_API_KEY: REPLICA_KEY,
    MIRROR_DB: path(name),
    SYNC_FOLLOW_LEADER: '1',
    SYNC_LEADER_MAX_AGE_MS: LEADER_MAX_AGE_MS,
    SYNC_STALE_AFTER_MS: LEADER_MAX_AGE_MS,
    LOG_LEVEL: 'info',
  };
  return keysAsFiles(env, join(dir, `${name}-keys`));
}

async function cli(args: string[], env: Record<string, string>) {
  return runCli(args, env, 120_000);
}

/** The leader's sync, then each follower's; the followers' outputs, by name. */
async function syncAll(): Promise<Record<string, string>> {
  const leader = await cli(['sync', '--once'], leaderEnv());
  expect(leader.code, leader.stderr).toBe(0);
  const out: Record<string, string> = {};
  for (const name of ['f1', 'f2']) {
    const r = await cli(['sync', '--once'], followerEnv(name));
    expect(r.code, `${name}: ${r.stdout}${r.stderr}`).toBe(0);
    out[name] = r.stdout + r.stderr;
  }
  return out;
}

async function startServe(): Promise<void> {
  serve = startCli(['serve'], {
    PATH: process.env.PATH,
    MIRROR_DB: path('leader'),
    REPLICA_API_KEY: REPLICA_KEY,
    REPLICA_PORT: String(replicaPort),
  });
  await serve.line(/"event":"replica.listening"/, 60_000);
}

async function stopServe(): Promise<void> {
  serve?.child.kill('SIGTERM');
  await serve?.exited(60_000);
  serve = undefined;
}

/** The active users as a follower must hold them: ids and the raw record, byte for byte. */
function activeUsers(name: string): string[] {
  const db = new Database(path(name), { readonly: true });
  try {
    return db
      .prepare<[], { u: string }>(
        `SELECT user_id || ' ' || client_user_id || ' ' || raw AS u FROM users WHERE deleted_at IS NULL ORDER BY user_id`,
      )
      .all()
      .map((r) => r.u);
  } finally {
    db.close();
  }
}

function expectFollowersEqualLeader(): void {
  const leader = activeUsers('leader');
  expect(leader.length).toBe(standIn.directory.size);
  expect(activeUsers('f1')).toEqual(leader);
  expect(activeUsers('f2')).toEqual(leader);
}

/** The daemon's gauges, read from a mirror file as the daemon reads it on a scrape. */
async function scrape(name: string): Promise<string> {
  const db = openMirror(path(name), { readonly: true });
  try {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.setSources({ mirror: () => mirrorFigures(new MirrorReader(db)), staleAfterMs: Number(LEADER_MAX_AGE_MS) });
    return await metrics.registry.metrics();
  } finally {
    db.close();
  }
}

async function control(route: string, body?: unknown): Promise<void> {
  const res = await fetch(`${standIn.baseUrl}/_stand-in/${route}`, {
    method: 'POST',
    ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
  });
  expect(res.status, `${route}: ${await res.clone().text()}`).toBeLessThan(300);
}

/** A round of churn through the stand-in's control API: 2 created, 3 updated, 2 deleted, 1 restored (from an earlier round). */
async function churn(round: number, deleted: string[]): Promise<void> {
  const ids = [...standIn.directory.records()].map((r) => String(r.user_id));
  await control('users', { count: 2 });
  for (let i = 0; i < 3; i++) {
    const change = i === 0 ? { change: 'connected_sources', direction: 'connect' } : { change: 'fallback_time_zone' };
    await control(`users/${ids[round * 11 + i] ?? ''}/update`, change);
  }
  for (const id of [ids[round * 11 + 5], ids[round * 11 + 6]]) {
    await control(`users/${id ?? ''}/delete`);
    deleted.push(id ?? '');
  }
  const back = deleted.shift();
  if (round > 0 && back !== undefined) await control(`users/${back}/restore`);
}

describe('a leader and two followers (docs/followers.md)', () => {
  beforeAll(async () => {
    requireBuiltCli('src/commands/serve.js');
    standIn = await startStandIn({ users: 400, seed: 44, orgs: 0, membersPerOrg: 0 });
    dir = mkdtempSync(join(tmpdir(), 'followers-'));
    replicaPort = await freePort();
    const first = await cli(['sync', '--once'], leaderEnv());
    expect(first.code, first.stderr).toBe(0);
    await startServe();
  }, 180_000);
  afterAll(async () => {
    await stopServe();
    await standIn?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('the replica tells how fresh it is; the official wire still parses (headers beside the body)', async () => {
    const res = await fetch(`http://127.0.0.1:${replicaPort}/v2/user?limit=1`, { headers: { 'x-service-api-key': REPLICA_KEY } });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-mirror-run-id')).toMatch(/^\d+$/);
    expect(Date.parse(res.headers.get('x-mirror-published-at') ?? '')).not.toBeNaN();
    expect(res.headers.get('x-mirror-source-at')).toBe(res.headers.get('x-mirror-published-at'));
    expect(res.headers.get('x-mirror-epoch')).toMatch(/^[0-9a-f]{8}$/);
    expect(res.headers.get('x-mirror-restored-at')).toBeNull();
    expect(((await res.json()) as { total: number }).total).toBe(400);
  });

  it('followers equal the leader after each round of creations, updates, deletions and restores', async () => {
    const deleted: string[] = [];
    for (let round = 0; round < 4; round++) {
      await churn(round, deleted);
      const out = await syncAll();
      expectFollowersEqualLeader();
      // The first follower runs list the whole leader; each later one tails its change feed (src/sync/follow-feed.ts).
      if (round > 0) for (const name of ['f1', 'f2']) expect(out[name]).toMatch(/"event":"sync.followed_feed"/);
    }
    // A follower's status gives the age of its data at the source, and /metrics' gauge has it too.
    const status = await cli(['status'], followerEnv('f1'));
    expect(status.code, status.stdout).toBe(0);
    expect(status.stdout).toMatch(/source\s+leader published at \S+ \(age \d+s\)/);
    const epoch = (
      await fetch(`http://127.0.0.1:${replicaPort}/v2/user?limit=1`, { headers: { 'x-service-api-key': REPLICA_KEY } })
    ).headers.get('x-mirror-epoch');
    expect(await scrape('f1')).toMatch(new RegExp(`^user_mirror_source_data_age_seconds\\{epoch="${epoch ?? ''}"\\} \\d+$`, 'm'));
    // The leader reads the service itself: no series at all.
    expect(await scrape('leader')).not.toMatch(/^user_mirror_source_data_age_seconds/m);
  }, 600_000);

  it('a stale leader: followers refuse it, delete nothing, and report stale (exit 1) naming the leader', async () => {
    // The leader sees a deletion, then its clock of record goes an hour back: a leader that stopped long ago.
    const gone = String([...standIn.directory.records()][3]?.user_id);
    await control(`users/${gone}/delete`);
    expect((await cli(['sync', '--once'], leaderEnv())).code).toBe(0);
    const leader = new Database(path('leader'));
    leader.exec(
      `UPDATE sync_runs SET published_at = strftime('%Y-%m-%dT%H:%M:%fZ', published_at, '-1 hour'),
         finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', finished_at, '-1 hour') WHERE published_at IS NOT NULL`,
    );
    leader.close();
    for (const name of ['f1', 'f2']) {
      const r = await cli(['sync', '--once'], followerEnv(name));
      expect(r.code).not.toBe(0);
      expect(r.stdout + r.stderr).toMatch(/leader is stale: its data was read from the service at .*nothing published, nothing deleted/);
      expect(activeUsers(name).some((u) => u.startsWith(`${gone} `))).toBe(true);
      const status = await cli(['status'], followerEnv(name));
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(
        /STALE\s+source: the leader's data was read from the service at .*the leader at SERVICE_BASE_URL is stale/,
      );
    }
    // The leader syncs again: fresh, and the followers follow, the deletion included.
    expect((await cli(['sync', '--once'], leaderEnv())).code).toBe(0);
    for (const name of ['f1', 'f2']) expect((await cli(['sync', '--once'], followerEnv(name))).code).toBe(0);
    expectFollowersEqualLeader();
    expect(activeUsers('f1').some((u) => u.startsWith(`${gone} `))).toBe(false);
  }, 600_000);

  it('a restored leader is noticed: refused until it syncs again, then the followers follow its new lineage', async () => {
    const backup = join(dir, 'leader-backup.db');
    expect((await cli(['backup', backup], leaderEnv())).code).toBe(0);
    await churn(5, []);
    await syncAll();
    await stopServe();
    const restored = await cli(['restore', backup], leaderEnv());
    expect(restored.code, restored.stderr).toBe(0);
    await startServe();
    // Restored and not re-synced: it serves the backup's past.
    for (const name of ['f1', 'f2']) {
      const r = await cli(['sync', '--once'], followerEnv(name));
      expect(r.code).not.toBe(0);
      expect(r.stdout + r.stderr).toMatch(/leader was restored from a backup at \S+ and has not published a sync since/);
    }
    expect((await cli(['sync', '--once'], leaderEnv())).code).toBe(0);
    // The restore is noticed on the feed too: the cursor is from another epoch, so the followers list the leader.
    const out = await syncAll();
    for (const name of ['f1', 'f2']) expect(out[name]).toMatch(/"event":"sync.feed_fallback"/);
    expectFollowersEqualLeader();
    await churn(6, []);
    const again = await syncAll();
    for (const name of ['f1', 'f2']) expect(again[name]).toMatch(/"event":"sync.followed_feed"/);
    expectFollowersEqualLeader();
  }, 600_000);
});
