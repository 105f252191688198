/**
 * Issue 52's done-when, written once and parameterised by size: a daemon
 * (`user-mirror daemon`, its own redis-server, the stand-in over HTTP) with
 * a `postgres` sink in SINKS_FILE into a private PostgreSQL cluster; the
 * directory churns (time zones and sources changed, users deleted, added,
 * restored) and the daemon is killed -9 during the sink's baseline (a COPY
 * of the sink's session seen in pg_stat_activity) and during its applies (a
 * batch transaction of the sink's session open). After the last kill the
 * daemon catches up and stops; then the destination's users, sources,
 * versions, connections (digests of every row) and position equal the
 * mirror's, the docs' recipes give the same rows on both, and as-of answers
 * from `user_history` equal `user-mirror resolve --as-of`.
 *
 * test/postgres-daemon.test.ts runs it at a few thousand users;
 * `npm run soak:postgres -- --users 100000` (bench/postgres-soak.ts) at scale.
 * No vitest here: the result says what was seen, the caller asserts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { ChangeFeed } from '../../db/change-feed.js';
import { openMirror } from '../../db/open.js';
import { startStandIn, type StandIn } from '../../src/stand-in/index.js';
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './daemon-process.js';
import { startPostgresCluster, type PostgresCluster } from './postgres-cluster.js';
import { compareRecipes } from './postgres-recipes.js';
import { destinationDigests, mirrorDigests, type Digests } from './postgres-sink.js';
import { freePort, startTestRedis, type TestRedis } from './redis-server.js';

export const SOAK_SINK = 'analytics';
const APPLICATION = `user-mirror sink ${SOAK_SINK}`;

export interface SoakOptions {
  users: number;
  /** Kills in all (at least 10 for the issue): `baselineKills` of them during baselines, the rest during applies. */
  kills: number;
  baselineKills: number;
  /** Feed events a sink transaction applies (small: an apply takes several transactions to catch). */
  batchEvents?: number;
  /** As-of samples compared with `resolve --as-of`. */
  asOfSamples?: number;
  /** Progress lines (the npm script prints them; the test stays quiet). */
  log?: (line: string) => void;
  /** Longest wait for any one step (the first sync of 100,000 users on two busy cores takes minutes). */
  stepTimeoutMs?: number;
}

export interface SoakResult {
  users: number;
  kills: { baseline: number; apply: number };
  /** Baseline kills after which the position was still the one before the baseline (nothing half loaded became visible). */
  baselineKillsConfirmed: number;
  /** Positions after each apply kill, strictly rising overall. */
  applyPositions: number[];
  events: number;
  mirror: Digests;
  destination: Digests;
  position: { mirror: { cursor: number; epoch: string }; destination: { cursor: number; epoch: string } };
  recipes: { compared: number; differing: string[] };
  asOf: { compared: number; found: number; differing: string[] };
  ms: { firstSync: number; total: number; catchUp: number };
}

/** What the sink's session is doing: a baseline (COPY), an apply (a batch transaction), or nothing. */
async function sinkPhase(admin: pg.Client): Promise<'baseline' | 'apply' | null> {
  const r = await admin.query<{ query: string }>(
    `SELECT query FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL`,
    [APPLICATION],
  );
  for (const { query } of r.rows) {
    if (query.startsWith('COPY ')) return 'baseline';
    if (/unnest\(|SELECT cursor, epoch FROM/.test(query)) return 'apply';
  }
  return null;
}

async function destinationPosition(admin: pg.Client): Promise<{ cursor: number | null; epoch: string | null }> {
  const exists = await admin.query<{ t: string | null }>(`SELECT to_regclass('user_mirror.sink_position') AS t`);
  if (exists.rows[0]?.t == null) return { cursor: null, epoch: null };
  const r = await admin.query<{ cursor: string | null; epoch: string | null }>(`SELECT cursor, epoch FROM user_mirror.sink_position`);
  const row = r.rows[0];
  return { cursor: row?.cursor == null ? null : Number(row.cursor), epoch: row?.epoch ?? null };
}

/** The mirror's feed now (read-only, beside the daemon). */
function feedLatest(mirrorDb: string): number {
  try {
    const db = openMirror(mirrorDb, { readonly: true });
    try {
      return new ChangeFeed(db).latest();
    } finally {
      db.close();
    }
  } catch {
    return 0;
  }
}

async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string, everyMs = 5): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`soak: timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

export async function runPostgresSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log ?? (() => undefined);
  const stepMs = o.stepTimeoutMs ?? 600_000;
  const started = Date.now();
  let cluster: PostgresCluster | undefined;
  let redis: TestRedis | undefined;
  let standIn: StandIn | undefined;
  let daemon: DaemonProcess | undefined;
  let admin: pg.Client | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'postgres-soak-'));
  try {
    cluster = await startPostgresCluster();
    const url = await cluster.createDatabase('analytics');
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const a = admin;
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: o.users, seed: 52 });
    const connection = join(dir, 'postgres-url');
    writeFileSync(connection, `${url}\n`, { mode: 0o600 });
    writeFileSync(
      join(dir, 'sinks.json'),
      JSON.stringify({
        sinks: [{ name: SOAK_SINK, kind: 'postgres', connection: { file: connection }, batch_events: o.batchEvents ?? 25 }],
      }),
    );
    const mirrorDb = join(dir, 'mirror.db');
    const env = daemonEnv({
      redisUrl: redis.url,
      standIn,
      mirrorDb,
      queuePrefix: 'soak',
      statusPort: await freePort(),
      cron: '*/2 * * * * *',
      extra: { SINKS_FILE: join(dir, 'sinks.json') },
    });
    delete env.MANAGEMENT_URL;
    delete env.MANAGEMENT_KEY;
    const start = async () => {
      daemon = spawnDaemon(env);
      await daemon.ready;
    };
    const kill = async () => {
      await daemon?.stop('SIGKILL');
      daemon = undefined;
    };

    // The first sync, then the sink's baseline of what it published: killed again and again while it COPYs.
    await start();
    const firstSync = Date.now();
    let baseline = 0;
    let confirmed = 0;
    while (baseline < o.baselineKills) {
      const before = await until(
        async () => {
          if ((await sinkPhase(a)) !== 'baseline') return undefined;
          const p = await destinationPosition(a);
          // A committed position (the empty mirror's, before the first sync) and a COPY under way: the baseline of the synced mirror.
          return p.cursor !== null && feedLatest(mirrorDb) > p.cursor ? p : undefined;
        },
        stepMs,
        'the sink to COPY a baseline',
      );
      await kill();
      baseline++;
      const after = await until(
        async () =>
          (await a.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1`, [APPLICATION])).rows.length === 0
            ? destinationPosition(a)
            : undefined,
        stepMs,
        'the killed session to end',
        20,
      );
      if (after.cursor === before.cursor && after.epoch === before.epoch) confirmed++;
      log(`kill ${baseline}: during the baseline (position after: ${after.cursor ?? 'none'})`);
      await start();
    }
    const firstSyncMs = Date.now() - firstSync;

    // Churn, and kills during the applies that follow each sync.
    const d = standIn.directory;
    const deleted: string[] = [];
    const per = Math.max(150, Math.round(o.users / 100));
    const churn = (round: number) => {
      const listed = d.page(0, o.users + 10_000);
      for (let i = 0; i < per; i++) {
        // Sources: the same users every round, so the stand-in connects one on a user's first update and disconnects
        // one on the next (the recipes about disconnections need some); time zones: other users each round.
        const sources = i % 2 === 1;
        const u = listed[sources ? (i * 13) % listed.length : (round * 7_919 + i * 13) % listed.length];
        if (u !== undefined) d.update(String(u.user_id), sources ? 'connected_sources' : 'fallback_time_zone');
      }
      const gone = listed.slice((round * 101) % listed.length).slice(0, Math.ceil(per / 20));
      d.delete(gone.map((u) => String(u.user_id)));
      deleted.push(...gone.map((u) => String(u.user_id)));
      d.add(Math.ceil(per / 20));
      if (round % 2 === 1) d.restore(deleted.splice(0, 2));
    };
    const applyPositions: number[] = [];
    let round = 0;
    while (applyPositions.length < o.kills - o.baselineKills) {
      if (round > (o.kills - o.baselineKills) * 4) throw new Error('soak: the sink applied every round before a kill could land');
      const published = feedLatest(mirrorDb);
      churn(round++);
      let polls = 0;
      // Some batches may commit first: kills land at different depths of an apply, and the position moves between them.
      const notBefore = Date.now() + Math.random() * 400;
      const seen = await until(
        async () => {
          if (Date.now() >= notBefore && (await sinkPhase(a)) === 'apply') return true;
          // Now and then: caught up with a sync that published this round, so nothing left to kill in; churn again.
          if (++polls % 50 !== 0) return undefined;
          const latest = feedLatest(mirrorDb);
          const p = await destinationPosition(a);
          return latest > published && p.cursor === latest && (await sinkIdle(a)) ? false : undefined;
        },
        stepMs,
        'the sink to apply a batch',
      );
      if (!seen) continue;
      await kill();
      await until(
        async () =>
          (await a.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1`, [APPLICATION])).rows.length === 0 ? true : undefined,
        stepMs,
        'the killed session to end',
        20,
      );
      const p = await destinationPosition(a);
      applyPositions.push(p.cursor ?? 0);
      log(`kill ${baseline + applyPositions.length}: during the applies (position after: ${p.cursor ?? 'none'})`);
      await start();
    }

    // No more churn: a sync of the last directory (the daemon started after the last churn), then the sink catches up; the daemon stops.
    const catchUp = Date.now();
    await daemon?.waitForLog((l) => l.event === 'sync.finished' && l.msg === 'sync succeeded', stepMs, 'a sync after the last churn');
    await until(
      async () => {
        const latest = feedLatest(mirrorDb);
        const p = await destinationPosition(a);
        return p.cursor === latest && latest > 0 ? true : undefined;
      },
      stepMs,
      'the destination to catch up',
      250,
    );
    const catchUpMs = Date.now() - catchUp;
    const last = daemon;
    await last?.stop('SIGTERM');
    daemon = undefined;
    for (const l of last?.logs ?? []) if (typeof l.event === 'string' && l.event.startsWith('sink.')) log(JSON.stringify(l));
    log('caught up; comparing');

    const db = openMirror(mirrorDb, { readonly: true });
    let mirror: Digests;
    let feed: { cursor: number; epoch: string };
    let samples: Array<{ client: string; at: string }>;
    try {
      mirror = mirrorDigests(db);
      feed = {
        cursor: new ChangeFeed(db).latest(),
        epoch: db.prepare(`SELECT epoch FROM change_feed`).pluck().get() as string,
      };
      samples = asOfSamples(db, o.asOfSamples ?? 20);
    } finally {
      db.close();
    }
    const destination = await destinationDigests(a, 'user_mirror');
    const dp = await destinationPosition(a);
    const someone = samples[0]?.client ?? '';
    const recipes = compareRecipes(url, mirrorDb, someone);
    const asOf = await compareAsOf(a, env, samples);
    return {
      users: o.users,
      kills: { baseline, apply: applyPositions.length },
      baselineKillsConfirmed: confirmed,
      applyPositions,
      events: feed.cursor,
      mirror,
      destination,
      position: { mirror: feed, destination: { cursor: dp.cursor ?? -1, epoch: dp.epoch ?? '' } },
      recipes,
      asOf,
      ms: { firstSync: firstSyncMs, total: Date.now() - started, catchUp: catchUpMs },
    };
  } finally {
    await daemon?.stop('SIGKILL').catch(() => undefined);
    await admin?.end().catch(() => undefined);
    await standIn?.close();
    await redis?.stop();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** No transaction of the sink's open (between passes). */
async function sinkIdle(admin: pg.Client): Promise<boolean> {
  const r = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL`, [APPLICATION]);
  return r.rows.length === 0;
}

/**
 * Users and times to ask as of: users whose versions changed (and some
 * that did not), at each version's first instant, its last, and just after
 * it ended, and a time before any history of theirs.
 */
function asOfSamples(db: ReturnType<typeof openMirror>, n: number): Array<{ client: string; at: string }> {
  const rows = db
    .prepare(
      `SELECT client_user_id AS client, valid_from, valid_to FROM user_history
       WHERE user_id IN (SELECT user_id FROM user_history GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT ?)
       ORDER BY user_id, valid_from`,
    )
    .all(Math.max(1, Math.ceil(n / 3))) as Array<{ client: string; valid_from: string; valid_to: string | null }>;
  const shift = (t: string, ms: number) => new Date(Date.parse(t) + ms).toISOString();
  const out: Array<{ client: string; at: string }> = [];
  for (const r of rows) {
    out.push({ client: r.client, at: r.valid_from });
    if (r.valid_to !== null) out.push({ client: r.client, at: shift(r.valid_to, -1) }, { client: r.client, at: r.valid_to });
  }
  const first = rows[0];
  if (first !== undefined) out.push({ client: first.client, at: shift(first.valid_from, 1) });
  return out.slice(0, n);
}

/** `resolve --as-of` against the destination's `user_history` at the same instant: user, record and span. */
async function compareAsOf(
  admin: pg.Client,
  env: Record<string, string>,
  samples: ReadonlyArray<{ client: string; at: string }>,
): Promise<{ compared: number; found: number; differing: string[] }> {
  const differing: string[] = [];
  let found = 0;
  const ts = (c: string) => `to_char(${c} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${c}`;
  for (const s of samples) {
    const cli = await runCli(['resolve', s.client, '--as-of', s.at, '--json'], env, 60_000);
    const r = await admin.query<{ user_id: string; raw: unknown; valid_from: string; valid_to: string | null }>(
      `SELECT user_id::text, raw, ${ts('valid_from')}, ${ts('valid_to')} FROM user_mirror.user_history
       WHERE client_user_id = $1 AND valid_from <= $2::timestamptz AND (valid_to IS NULL OR valid_to > $2::timestamptz)
       ORDER BY valid_from DESC LIMIT 1`,
      [s.client, s.at],
    );
    const row = r.rows[0];
    const key = `${s.client} as of ${s.at}`;
    if (cli.code === 3) {
      if (row !== undefined) differing.push(`${key}: resolve found none, PostgreSQL ${row.user_id}`);
      continue;
    }
    if (cli.code !== 0) {
      differing.push(`${key}: resolve exited ${cli.code}: ${cli.stderr.trim()}`);
      continue;
    }
    const answer = JSON.parse(cli.stdout) as { user_id: string; valid_from: string; valid_to: string | null; user: unknown };
    found++;
    if (row === undefined) differing.push(`${key}: PostgreSQL found none, resolve ${answer.user_id}`);
    else if (
      row.user_id !== answer.user_id ||
      row.valid_from !== answer.valid_from ||
      row.valid_to !== answer.valid_to ||
      JSON.stringify(sortKeys(row.raw)) !== JSON.stringify(sortKeys(answer.user))
    )
      differing.push(`${key}: PostgreSQL ${JSON.stringify(row)} ≠ resolve ${cli.stdout.trim()}`);
  }
  return { compared: samples.length, found, differing };
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  return v;
}
