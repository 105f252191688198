/**
 * The PostgreSQL sink run by the daemon (SINKS_FILE kind `postgres`):
 *
 * - issue 52's done-when at a size a busy CI runs (./support/postgres-soak.ts,
 *   the same scenario `npm run soak:postgres` runs at 100,000 users): kill -9
 *   of the daemon during the baseline and during applies, then every table,
 *   the position, the docs' recipes and as-of answers equal the mirror's;
 * - PostgreSQL stopped: `status` exits 1 naming the sink and where it goes
 *   (no password), the feed keeps the events the destination has not taken
 *   (retention holds at its position), and once PostgreSQL is back the sink
 *   catches up by applies, equal.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { ChangeFeed } from '../db/change-feed.js';
import { openMirror } from '../db/open.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { eventually } from './support/eventually.js';
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';
import { destinationTables, mirrorTables } from './support/postgres-sink.js';
import { runPostgresSoak } from './support/postgres-soak.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';

describe('a daemon with a postgres sink, killed -9 through churn', () => {
  it('ends equal to the mirror: tables, position, recipes, as-of answers', { timeout: 900_000 }, async () => {
    const r = await runPostgresSoak({ users: 3_000, kills: 10, baselineKills: 3, batchEvents: 10, asOfSamples: 15 });
    expect(r.kills).toEqual({ baseline: 3, apply: 7 });
    expect(r.baselineKillsConfirmed, 'each baseline kill left the position before the baseline').toBe(3);
    expect(r.applyPositions.at(-1) ?? 0).toBeGreaterThan(r.applyPositions[0] ?? 0);
    expect(r.destination.users.rows).toBeGreaterThanOrEqual(3_000);
    expect(r.destination).toEqual(r.mirror);
    expect(r.position.destination).toEqual(r.position.mirror);
    expect(r.recipes.compared).toBeGreaterThanOrEqual(4);
    expect(r.recipes.differing).toEqual([]);
    expect(r.asOf.found).toBeGreaterThan(5);
    expect(r.asOf.differing).toEqual([]);
  });
});

describe('PostgreSQL stopped under a running daemon', () => {
  let cluster: PostgresCluster | undefined;
  let redis: TestRedis | undefined;
  let standIn: StandIn | undefined;
  let daemon: DaemonProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'postgres-daemon-'));

  afterAll(async () => {
    await daemon?.stop('SIGKILL').catch(() => undefined);
    await standIn?.close();
    await redis?.stop();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it(
    'status exits 1 naming the sink, the feed holds its events past retention, and it catches up equal',
    { timeout: 600_000 },
    async () => {
      cluster = await startPostgresCluster();
      const url = await cluster.createDatabase('analytics');
      redis = await startTestRedis();
      standIn = await startStandIn({ port: 0, users: 300, seed: 7 });
      const connection = join(dir, 'postgres-url');
      writeFileSync(connection, `${url}\n`, { mode: 0o600 });
      writeFileSync(
        join(dir, 'sinks.json'),
        JSON.stringify({ sinks: [{ name: 'warehouse', kind: 'postgres', connection: { file: connection } }] }),
      );
      const mirrorDb = join(dir, 'mirror.db');
      const env = daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb,
        queuePrefix: 'pgdown',
        statusPort: await freePort(),
        cron: '*/2 * * * * *',
        // One minute: what no sink holds is pruned after each sync.
        extra: { SINKS_FILE: join(dir, 'sinks.json'), CHANGES_RETENTION_DAYS: String(1 / 1_440) },
      });
      delete env.MANAGEMENT_URL;
      delete env.MANAGEMENT_KEY;
      const admin = async () => {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        return c;
      };
      const position = async () => {
        const c = await admin();
        try {
          const r = await c.query<{ cursor: string | null }>(`SELECT cursor FROM user_mirror.sink_position`).catch(() => ({ rows: [] }));
          return r.rows[0]?.cursor == null ? null : Number(r.rows[0].cursor);
        } finally {
          await c.end();
        }
      };
      const feed = () => {
        const db = openMirror(mirrorDb, { readonly: true });
        try {
          const f = new ChangeFeed(db);
          return { latest: f.latest(), oldest: f.bounds().oldest };
        } finally {
          db.close();
        }
      };

      daemon = spawnDaemon(env);
      await daemon.ready;
      await eventually(async () => feed().latest > 0 && (await position()) === feed().latest, 120_000, 'the first baseline');
      const ok = await runCli(['status', '--json'], env);
      const healthy = (JSON.parse(ok.stdout) as { sinks: Array<{ name: string; problem: string | null }> }).sinks;
      expect(healthy.find((s) => s.name === 'warehouse')?.problem).toBeNull();

      // PostgreSQL down; the directory churns for longer than the feed's retention.
      const held = (await position()) ?? 0;
      const baselines = daemon.logs.filter((l) => l.event === 'sink.postgres_baseline').length;
      await cluster.stopServer();
      const d = standIn.directory;
      const ids = d.page(0, 400).map((u) => String(u.user_id));
      for (const id of ids.slice(0, 30)) d.update(id, 'connected_sources');
      d.delete(ids.slice(30, 33));
      d.add(4);
      await daemon.waitForLog((l) => l.event === 'sink.failing' && l.sink === 'warehouse', 60_000, 'sink.failing');
      await eventually(() => feed().latest > held, 60_000, 'a sync to publish while PostgreSQL is down');
      const status = await runCli(['status', '--json'], env);
      expect(status.code).toBe(1);
      const sink = (JSON.parse(status.stdout) as { sinks: Array<{ name: string; where: string; problem: string | null }> }).sinks.find(
        (s) => s.name === 'warehouse',
      );
      expect(sink?.where).toBe(`postgres 127.0.0.1:${cluster.port}/analytics schema user_mirror`);
      expect(sink?.problem).toMatch(/^destination failing/);
      expect(status.stdout).not.toContain('postgres://');
      const text = await runCli(['status'], env);
      expect(text.stdout).toMatch(/sink warehouse \(postgres, postgres 127\.0\.0\.1:\d+\/analytics schema user_mirror.*FAILING/);

      // Past retention (one minute) and a sync after it: the events the destination lacks are still in the feed.
      await new Promise((r) => setTimeout(r, 65_000));
      for (const id of ids.slice(40, 45)) d.update(id, 'fallback_time_zone');
      const before = feed().latest;
      await eventually(() => feed().latest > before, 60_000, 'a sync after the retention period');
      expect(feed().oldest ?? Infinity).toBeLessThanOrEqual(held + 1);

      await cluster.startServer();
      await eventually(async () => (await position()) === feed().latest, 120_000, 'the sink to catch up');
      expect(daemon.logs.filter((l) => l.event === 'sink.postgres_baseline').length, 'caught up by applies, no rebaseline').toBe(baselines);
      await daemon.stop('SIGTERM');
      daemon = undefined;
      const db = openMirror(mirrorDb, { readonly: true });
      const c = await admin();
      try {
        // A deletion's time is read from its event, which retention may prune once the sink took it: compared apart.
        const want = mirrorTables(db);
        const got = await destinationTables(c, 'user_mirror');
        const deletedIn = (rows: Array<Record<string, unknown>>) => rows.filter((u) => u.deleted_at !== null).map((u) => u.user_id);
        expect(deletedIn(got.users)).toEqual(
          db.prepare(`SELECT user_id FROM users WHERE deleted_at IS NOT NULL ORDER BY user_id`).pluck().all() as string[],
        );
        const live = (t: typeof want) => ({ ...t, users: t.users.map(({ deleted_at: _, ...u }) => u) });
        expect(live(got)).toEqual(live(want));
      } finally {
        db.close();
        await c.end();
      }
    },
  );
});
