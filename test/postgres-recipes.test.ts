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
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli } from './support/cli-process.js';
import { ROOT } from './support/mirror-fixtures.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';
import { runSinkPass } from './support/postgres-sink.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';

let cluster: PostgresCluster;
let rig: SyncRig;
let url: string;
let someone = '';

/** Recipes of a doc's ```sql blocks by their comment line(s), with the setting lines (SET, \set, .parameter) of their block. */
function recipes(file: string): { byComment: Map<string, string>; settings: string[]; blocks: string[] } {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const blocks = [...text.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  const byComment = new Map<string, string>();
  const settings: string[] = [];
  for (const block of blocks) {
    let comment = '';
    let statement = '';
    for (const line of block.split('\n')) {
      if (statement === '' && line.startsWith('-- ')) comment += (comment === '' ? '' : ' ') + line.slice(3);
      else if (statement === '' && /^(SET |\\set |\.parameter )/.test(line)) settings.push(line);
      else if (line.trim() !== '') {
        statement += `${line}\n`;
        if (line.trimEnd().endsWith(';')) {
          if (comment !== '') byComment.set(comment, statement);
          comment = '';
          statement = '';
        }
      }
    }
  }
  return { byComment, settings, blocks };
}

function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted && ch === '"' && text[i + 1] === '"') {
      cell += '"';
      i++;
    } else if (ch === '"') {
      quoted = !quoted;
    } else if (!quoted && ch === ',') {
      row.push(cell);
      cell = '';
    } else if (!quoted && ch === '\n') {
      rows.push([...row, cell]);
      row = [];
      cell = '';
    } else if (quoted || ch !== '\r') {
      cell += ch;
    }
  }
  if (cell !== '' || row.length > 0) rows.push([...row, cell]);
  return rows;
}

/** PostgreSQL's `2026-11-29 03:07:14.12+00` and SQLite's `2026-11-29T03:07:14.120Z` alike. */
function normal(cell: string): string {
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?(?:Z|\+00(?::00)?)$/.exec(cell);
  return m === null ? cell : `${m[1]}T${m[2]}.${(m[3] ?? '').padEnd(3, '0').slice(0, 3)}Z`;
}

function answer(rows: string[][]): string[] {
  return rows.map((r) => r.map(normal).join(',')).sort();
}

function psql(input: string): string {
  const r = spawnSync('psql', [url, '-X', '-q', '-t', '--csv', '-v', 'ON_ERROR_STOP=1'], { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

function sqlite(input: string): string {
  const r = spawnSync('sqlite3', ['-readonly', '-csv', rig.dbPath], { input, encoding: 'utf8' });
  if (r.status !== 0 || r.stderr !== '') throw new Error(`sqlite3 exited ${r.status}: ${r.stderr}`);
  return r.stdout;
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
