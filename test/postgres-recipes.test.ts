/**
 * docs/postgres.md's recipes give the answers docs/sql.md's give on the
 * mirror: each PostgreSQL recipe is paired with the sql.md recipe under the
 * same comment line, run as the docs say (psql with the block's SET and
 * \set lines, the id of a user the churn changed in place of the example;
 * the sqlite3 CLI with the `.parameter set` line), and the rows compared
 * (times in one notation, rows as a set: ties may come in either order).
 * The mirror is synced from the stand-in, then churned (sources connected
 * and disconnected, time zones changed, users deleted and added), and the
 * destination loaded by a baseline and then the feed. The whole block also
 * runs as written in psql.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli } from './support/cli-process.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';
import { answer, parseCsv, psql as runPsql, recipes, sqlite as runSqlite } from './support/postgres-recipes.js';
import { runSinkPass } from './support/postgres-sink.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

let cluster: PostgresCluster;
let rig: SyncRig;
let url: string;
let someone = '';

function psql(input: string): string {
  return runPsql(url, input);
}

function sqlite(input: string): string {
  return runSqlite(rig.dbPath, input);
}

beforeAll(async () => {
  requireBuiltCli('src/sinks/postgres/main.js');
  cluster = await startPostgresCluster();
  url = await cluster.createDatabase('analytics');
  const connectionFile = join(cluster.dir, 'connection');
  writeFileSync(connectionFile, url, { mode: 0o600 });
  rig = await createSyncRig({ users: 300 });
  expect((await rig.sync()).status).toBe('succeeded');
  const options = { kind: 'postgres', connection: { file: connectionFile }, schema: 'user_mirror', batch_events: 40 };
  await runSinkPass(rig.dbPath, options);
  const d = rig.standIn.directory;
  const listed = d.page(0, 300);
  const id = (i: number) => String(listed[i]?.user_id);
  // The stand-in alternates: a user's first update connects a source (when one is free), the second disconnects one.
  for (let i = 0; i < 40; i++) d.update(id(i), 'connected_sources');
  for (let i = 40; i < 60; i++) d.update(id(i), 'fallback_time_zone');
  d.delete([id(60), id(61), id(62)]);
  d.add(5);
  expect((await rig.sync()).status).toBe('succeeded');
  for (let i = 0; i < 20; i++) d.update(id(i), 'connected_sources');
  expect((await rig.sync()).status).toBe('succeeded');
  await runSinkPass(rig.dbPath, options);
  someone = String(listed[1]?.client_user_id);
});

afterAll(async () => {
  await rig?.close();
  await cluster?.stop();
});

describe('docs/postgres.md recipes', () => {
  const pg = recipes('docs/postgres.md');
  const lite = recipes('docs/sql.md');
  const shared = [...pg.byComment.keys()].filter((k) => lite.byComment.has(k));

  it('pair with sql.md: the questions issue 52 names are among them', () => {
    for (const q of [
      'active users per source at a time',
      "a user's sources at a time",
      'monthly active users',
      'who disconnected a source',
    ])
      expect(
        shared.some((k) => k.startsWith(q)),
        q,
      ).toBe(true);
  });

  it('each block runs whole in psql, as written', () => {
    const block = pg.blocks.find((b) => b.includes('\\set client_user_id'));
    expect(block).toBeDefined();
    psql(block ?? '');
  });

  it.each(shared)('%s: the same rows as on the mirror', (comment) => {
    const pgSettings = pg.settings
      .filter((s) => !s.startsWith('\\set') || s.includes('client_user_id'))
      .map((s) => (s.startsWith('\\set client_user_id') ? `\\set client_user_id '${someone}'` : s));
    const onPg = answer(parseCsv(psql(`${[...new Set(pgSettings)].join('\n')}\n${pg.byComment.get(comment)}`)));
    const onMirror = answer(parseCsv(sqlite(`.parameter set :client_user_id '${someone}'\n${lite.byComment.get(comment)}`)));
    expect(onMirror.length, 'the mirror answers something').toBeGreaterThan(0);
    expect(onPg).toEqual(onMirror);
  });
});
