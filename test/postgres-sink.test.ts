/**
 * The PostgreSQL sink against a private PostgreSQL cluster this file starts
 * (test/support/postgres-cluster.ts) and a mirror built by real syncs of the
 * stand-in: a baseline, then churn (updates, sources connected and lost,
 * deletions, restores, new users) applied from the feed; after each pass
 * the destination's users, sources, versions, connections and position
 * equal the mirror's. A sink process SIGKILLed during the baseline's COPY
 * and during applies leaves no half table and no event applied twice: the
 * next pass ends equal. Also: a lost connection during a baseline, the
 * field policy, a newer destination layout refused.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror } from '../db/open.js';
import { eventually } from './support/eventually.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';
import { destinationTables, mirrorTables, runSinkPass, startSinkChild } from './support/postgres-sink.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

const USERS = 4_000;

let cluster: PostgresCluster;
let rig: SyncRig;
let admin: pg.Client;
let connectionFile: string;
/** Users the churn deleted upstream, for restores. */
const deleted: string[] = [];

const options = (schema: string, extra: Record<string, unknown> = {}) => ({
  kind: 'postgres',
  connection: { file: connectionFile },
  schema,
  ...extra,
});

/** A `SELECT count(*)::int AS n …` answer. */
async function count(sql: string): Promise<number> {
  return Number((await admin.query<{ n: number }>(sql)).rows[0]?.n);
}

async function expectEqual(schema: string): Promise<void> {
  const db = openMirror(rig.dbPath, { readonly: true });
  try {
    const want = mirrorTables(db);
    const got = await destinationTables(admin, schema);
    expect(got.position).toEqual(want.position);
    expect(got.users.length).toBe(want.users.length);
    expect(got.users).toEqual(want.users);
    expect(got.sources).toEqual(want.sources);
    expect(got.versions).toEqual(want.versions);
    expect(got.connections).toEqual(want.connections);
  } finally {
    db.close();
  }
}

/** One sync after changing the stand-in's directory: `n` updates of each kind, deletions, restores, additions. */
async function churn(n: number): Promise<void> {
  const d = rig.standIn.directory;
  const listed = d.page(0, USERS);
  for (let i = 0; i < n; i++) {
    const id = String(listed[(i * 7) % listed.length]?.user_id);
    d.update(id, i % 2 === 0 ? 'fallback_time_zone' : 'connected_sources');
  }
  const gone = listed.slice(n, n + Math.ceil(n / 10)).map((r) => String(r.user_id));
  d.delete(gone);
  deleted.push(...gone);
  d.add(Math.ceil(n / 10));
  const summary = await rig.sync();
  expect(summary.status).toBe('succeeded');
}

beforeAll(async () => {
  requireBuiltCli('src/sinks/postgres/main.js');
  cluster = await startPostgresCluster();
  const url = await cluster.createDatabase('analytics');
  connectionFile = join(cluster.dir, 'connection');
  writeFileSync(connectionFile, `${url}\n`, { mode: 0o600 });
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  rig = await createSyncRig({ users: USERS });
  expect((await rig.sync()).status).toBe('succeeded');
  await churn(40);
});

afterAll(async () => {
  await admin?.end();
  await rig?.close();
  await cluster?.stop();
});

describe('baseline, then the feed', () => {
  it('a first pass loads the mirror by COPY: every table and the position equal the mirror', async () => {
    const out = await runSinkPass(rig.dbPath, options('main'));
    expect(out).toContain('"event":"postgres.baseline"');
    await expectEqual('main');
  });

  it('churn syncs are applied from the feed in batches, each with its position, SCD2 kept', async () => {
    await churn(60);
    rig.standIn.directory.restore(deleted.splice(0, 3));
    await churn(30);
    const out = await runSinkPass(rig.dbPath, options('main', { batch_events: 25 }));
    expect(out).not.toContain('"event":"postgres.baseline"');
    expect((out.match(/"event":"postgres.batch"/g) ?? []).length).toBeGreaterThan(3);
    await expectEqual('main');
    expect(await count(`SELECT count(*)::int AS n FROM main.versions WHERE valid_to IS NOT NULL`)).toBeGreaterThan(50);
    const open = await admin.query(
      `SELECT count(*)::int AS n FROM main.versions WHERE valid_to IS NULL GROUP BY user_id HAVING count(*) > 1`,
    );
    expect(open.rows).toEqual([]);
  });

  it('a pass with nothing new applies nothing', async () => {
    const out = await runSinkPass(rig.dbPath, options('main'));
    expect(out).not.toMatch(/postgres\.(batch|baseline)/);
  });
});

describe('kill -9', () => {
  it('during the baseline COPY: no table is half loaded, no position is taken, and the next pass loads it whole', async () => {
    for (let kill = 0; kill < 2; kill++) {
      const c = startSinkChild(rig.dbPath, options('killed_baseline'));
      await eventually(
        async () => {
          const r = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'COPY %'`, [
            'user-mirror sink killed_baseline',
          ]);
          return r.rows.length > 0 || c.child.exitCode !== null;
        },
        60_000,
        () => `the sink's COPY to start\n${c.out()}${c.err()}`,
        5,
      );
      expect(c.child.exitCode, 'the pass ended before the kill: make the mirror bigger').toBeNull();
      c.child.kill('SIGKILL');
      await c.exited;
      // The server notices the dead client and rolls its transaction back.
      await eventually(
        async () =>
          (await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1`, ['user-mirror sink killed_baseline'])).rows
            .length === 0,
        60_000,
        'the killed session to end',
      );
      const position = await admin.query(`SELECT cursor FROM killed_baseline.sink_position`);
      expect(position.rows).toEqual([{ cursor: null }]);
      for (const table of ['users', 'sources', 'versions', 'source_history']) {
        expect(await count(`SELECT count(*)::int AS n FROM killed_baseline.${table}`), table).toBe(0);
      }
    }
    await runSinkPass(rig.dbPath, options('killed_baseline'));
    await expectEqual('killed_baseline');
  });

  it('during applies, again and again: the position and the rows move together, and the last pass ends equal', async () => {
    await runSinkPass(rig.dbPath, options('killed_apply'));
    await churn(200);
    await churn(200);
    let kills = 0;
    let last = (await destinationTables(admin, 'killed_apply')).position.cursor;
    for (let round = 0; round < 8; round++) {
      const c = startSinkChild(rig.dbPath, options('killed_apply', { batch_events: 10 }));
      await eventually(
        () => c.out().includes('"event":"postgres.batch"') || c.child.exitCode !== null,
        60_000,
        () => `a batch\n${c.out()}${c.err()}`,
        2,
      );
      if (c.child.exitCode !== null) break;
      c.child.kill('SIGKILL');
      await c.exited;
      kills++;
      const now = (await destinationTables(admin, 'killed_apply')).position.cursor;
      expect(now).toBeGreaterThan(last);
      last = now;
    }
    expect(kills).toBeGreaterThanOrEqual(3);
    await runSinkPass(rig.dbPath, options('killed_apply'));
    await expectEqual('killed_apply');
  });
});

describe('a lost connection', () => {
  it('during the baseline (the server ends the session): the pass fails, nothing is visible, the next pass loads it', async () => {
    const c = startSinkChild(rig.dbPath, options('lost'));
    await eventually(
      async () =>
        (
          await admin.query(
            `SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'COPY %'`,
            ['user-mirror sink lost'],
          )
        ).rows.length > 0 || c.child.exitCode !== null,
      60_000,
      'the COPY to terminate',
      5,
    );
    expect(await c.exited).toBe(1);
    expect(c.out()).toContain('"event":"postgres.failed"');
    expect((await admin.query(`SELECT cursor FROM lost.sink_position`)).rows).toEqual([{ cursor: null }]);
    expect(await count(`SELECT count(*)::int AS n FROM lost.users`)).toBe(0);
    await runSinkPass(rig.dbPath, options('lost'));
    await expectEqual('lost');
  });
});

describe('the field policy', () => {
  it('a dropped field is never written, client_user_id is an HMAC in users and versions, dropped sources leave no rows', async () => {
    const keyFile = join(cluster.dir, 'hmac.key');
    writeFileSync(keyFile, 'k'.repeat(40), { mode: 0o600 });
    const policy = { client_user_id: 'hmac', hmac_key_file: keyFile, fields: { drop: ['fallback_birth_date', 'connected_sources'] } };
    await runSinkPass(rig.dbPath, options('pseudonymous', { field_policy: policy }));
    await churn(20);
    await runSinkPass(rig.dbPath, options('pseudonymous', { field_policy: policy, batch_events: 7 }));
    const { createHmac } = await import('node:crypto');
    const db = openMirror(rig.dbPath, { readonly: true });
    const want = mirrorTables(db);
    db.close();
    const got = await destinationTables(admin, 'pseudonymous');
    expect(got.position).toEqual(want.position);
    expect(got.sources).toEqual([]);
    expect(got.connections).toEqual([]);
    expect(got.users.length).toBe(want.users.length);
    const byId = new Map(want.users.map((u) => [u.user_id, u]));
    for (const u of got.users) {
      const m = byId.get(u.user_id);
      expect(u.client_user_id).toBe(createHmac('sha256', 'k'.repeat(40)).update(String(m?.client_user_id)).digest('hex'));
      expect(u.fallback_birth_date).toBeNull();
      expect(u.raw).not.toHaveProperty('fallback_birth_date');
      expect(u.raw).not.toHaveProperty('connected_sources');
      expect((u.raw as Record<string, unknown>).client_user_id).toBe(u.client_user_id);
      expect(u.fallback_time_zone_id).toBe(m?.fallback_time_zone_id);
    }
    const leaks = `SELECT count(*)::int AS n FROM pseudonymous.versions
      WHERE raw ? 'fallback_birth_date' OR raw ? 'connected_sources' OR length(client_user_id) <> 64`;
    expect(await count(leaks)).toBe(0);
    expect(got.versions.length).toBe(want.versions.length);
  });
});

describe('the destination layout', () => {
  it('a newer layout than this build knows is refused, named, and left untouched', async () => {
    await runSinkPass(rig.dbPath, options('newer'));
    await admin.query(`UPDATE newer.sink_position SET schema_version = 99`);
    const before = await destinationTables(admin, 'newer');
    await churn(5);
    const c = startSinkChild(rig.dbPath, options('newer'));
    expect(await c.exited).toBe(1);
    expect(c.out()).toContain('layout 99');
    expect(await destinationTables(admin, 'newer')).toEqual(before);
  });

  it('bad options exit 2 and name the field', async () => {
    const c = startSinkChild(rig.dbPath, { kind: 'postgres', schema: 'Bad-Name', connection: { file: connectionFile } });
    expect(await c.exited).toBe(2);
    expect(c.err()).toContain('schema');
  });
});

// Last: it closes the rig's own connection (a restore refuses a mirror another connection holds).
describe('a restore of the mirror', () => {
  it('changes the feed epoch: the next pass rebaselines, and the destination equals the restored mirror', async () => {
    const backup = join(rig.dir, 'backup.db');
    const taken = await runCli(['backup', backup], rig.env());
    expect(taken.code, taken.stderr).toBe(0);
    await churn(30);
    await runSinkPass(rig.dbPath, options('main'));
    await expectEqual('main');
    rig.db.close();
    const restored = await runCli(['restore', backup], rig.env());
    expect(restored.code, restored.stderr).toBe(0);
    const out = await runSinkPass(rig.dbPath, options('main'));
    expect(out).toMatch(/"event":"postgres.baseline","why":"the feed's epoch changed/);
    await expectEqual('main');
  });
});
