/**
 * bench:follow: a follower syncing from a leader mirror's replica
 * (docs/followers.md) against the leader syncing from the service, at
 * BENCH_USERS users (default 100,000). One process: the stand-in, the
 * leader's replica and both syncs share the machine's cores, as they would
 * not in production, so the ratio to the leader's own run, measured in the
 * same sitting, is the figure to read.
 *
 * Rows: a first sync into an empty file; a re-sync after 1% of the users
 * changed (updated, deleted, created in equal parts), by each path: one
 * follower lists the whole leader again, the other tails the leader's change
 * feed after the cursor its first sync reached (src/sync/follow-feed.ts).
 * Bytes are what the replica sent the follower (bodies as read).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openMirror } from '../db/open.js';
import { ReplicaReader } from '../db/replica-reader.js';
import { startReplicaServer } from '../src/replica/server.js';
import { ServiceClient } from '../src/service/client.js';
import { startStandIn } from '../src/stand-in/index.js';
import { runSync } from '../src/sync/engine.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { silentLogger } from '../src/runtime/log.js';

const users = Number(process.env.BENCH_USERS ?? '100000');
const dir = mkdtempSync(join(tmpdir(), 'bench-follow-'));
const standIn = await startStandIn({ users, seed: 44, orgs: 0, membersPerOrg: 0, requestLogSize: 1 });
const leaderDb = openMirror(join(dir, 'leader.db'));
const followerDb = openMirror(join(dir, 'follower.db'));
const feedFollowerDb = openMirror(join(dir, 'feed-follower.db'));
const replica = await startReplicaServer({
  settings: {
    host: '127.0.0.1',
    port: 0,
    apiKey: 'rk_bench_follow',
    apiKeyHeaders: ['x-service-api-key'],
    maxStalenessMs: 3_600_000,
    maxConnections: 64,
    headersTimeoutMs: 30_000,
    idleTimeoutMs: 30_000,
  },
  reader: new ReplicaReader(openMirror(join(dir, 'leader.db'), { readonly: true })),
  logger: silentLogger,
});

let replicaBytes = 0;
const service = new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: standIn.apiKey, apiKeyHeader: standIn.apiKeyHeader });
const leaderReplica = new ServiceClient({ baseUrl: `http://127.0.0.1:${replica.port}`, apiKey: 'rk_bench_follow' });
const leaderWriter = sqliteRunWriter(leaderDb);
const followerWriter = sqliteRunWriter(followerDb);
const feedFollowerWriter = sqliteRunWriter(feedFollowerDb);
// Counts what the replica sent a follower: the pages' bodies as the client read them.
const counting = {
  listUserRecords: async (...args: Parameters<ServiceClient['listUserRecords']>) => {
    const page = await leaderReplica.listUserRecords(...args);
    replicaBytes += page.body.length;
    return page;
  },
  resolveUser: (...args: Parameters<ServiceClient['resolveUser']>) => leaderReplica.resolveUser(...args),
};
// The leader's change feed, counted the same way: the second follower's re-syncs tail it.
const feed = {
  leaderFeedPage: async (...args: Parameters<ServiceClient['leaderFeedPage']>) => {
    const page = await leaderReplica.leaderFeedPage(...args);
    replicaBytes += page.body.length;
    return page;
  },
};

async function timed(run: () => Promise<{ status: string }>): Promise<number> {
  const started = performance.now();
  const summary = await run();
  if (summary.status !== 'succeeded') throw new Error(`run ${summary.status}`);
  return performance.now() - started;
}

function churn(share: number): number {
  const n = Math.max(3, Math.floor(users * share));
  const ids = [...standIn.directory.records()].slice(0, n).map((r) => String(r.user_id));
  const third = Math.floor(n / 3);
  for (const id of ids.slice(0, third)) standIn.directory.update(id);
  standIn.directory.delete(ids.slice(third, 2 * third));
  standIn.directory.add(third);
  return 3 * third;
}

const rows: string[] = [];
const row = (what: string, leaderMs: number, followerMs: number, bytes: number) =>
  rows.push(
    `| ${what} | ${(leaderMs / 1000).toFixed(2)} | ${(followerMs / 1000).toFixed(2)} | ${(followerMs / leaderMs).toFixed(2)}× | ${(bytes / 1e6).toFixed(1)} |`,
  );

try {
  const leaderFirst = await timed(() => runSync({ client: service, writer: leaderWriter }));
  replicaBytes = 0;
  const followerFirst = await timed(() => runSync({ client: counting, writer: followerWriter, follow: { feed: null } }));
  row('first sync (lists the leader)', leaderFirst, followerFirst, replicaBytes);
  await timed(() => runSync({ client: counting, writer: feedFollowerWriter, follow: { feed } }));
  const changed = churn(0.01);
  const leaderResync = await timed(() => runSync({ client: service, writer: leaderWriter }));
  replicaBytes = 0;
  const followerResync = await timed(() => runSync({ client: counting, writer: followerWriter, follow: { feed: null } }));
  const what = `re-sync after ${changed.toLocaleString('en')} changes (1%)`;
  row(`${what}, listing the leader`, leaderResync, followerResync, replicaBytes);
  replicaBytes = 0;
  const feedResync = await timed(() => runSync({ client: counting, writer: feedFollowerWriter, follow: { feed } }));
  row(`${what}, tailing its feed`, leaderResync, feedResync, replicaBytes);
  const held = (db: typeof leaderDb) =>
    db.prepare(`SELECT count(*) || ' ' || total(length(raw)) FROM users WHERE deleted_at IS NULL`).pluck().get();
  if (held(leaderDb) !== held(followerDb) || held(leaderDb) !== held(feedFollowerDb)) {
    throw new Error('a follower does not hold what the leader holds');
  }
  console.log(`bench:follow, ${users.toLocaleString('en')} users, Node ${process.version}\n`);
  console.log(
    '| run | leader from the service (s) | follower from the leader (s) | follower ÷ leader | replica bytes to the follower (MB) |',
  );
  console.log('|---|---:|---:|---:|---:|');
  for (const r of rows) console.log(r);
} finally {
  await Promise.all([service.close(), leaderReplica.close(), replica.close()]);
  leaderDb.close();
  followerDb.close();
  feedFollowerDb.close();
  await standIn.close();
  rmSync(dir, { recursive: true, force: true });
}
