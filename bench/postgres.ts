/**
 * The PostgreSQL sink (issue 52), on a private cluster this bench starts
 * (test/support/postgres-cluster.ts) and a mirror synced from the stand-in:
 *
 * - baseline: rows/s of the sink's baseline (one snapshot of the mirror,
 *   COPY of its four tables, indexes built, position recorded: one
 *   transaction), against `psql` doing the same work in the same run from
 *   files holding the same rows (TRUNCATE, drop the indexes, `\copy` the
 *   four tables, build the indexes, one transaction);
 * - apply: events/s of a pass applying the feed after 1% of the users
 *   changed (half a time zone, half a connected source);
 * - disk: the schema's tables with their TOAST and indexes against the same
 *   rows in the mirror (users, connected_sources, user_versions,
 *   source_connections with their indexes, dbstat).
 *
 * BENCH_POSTGRES_USERS (default 100,000). Prints a Markdown table.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openMirror, type Db } from '../db/open.js';
import { openMirrorSnapshot } from '../db/sink-snapshot.js';
import { ServiceClient } from '../src/service/client.js';
import { compileFieldPolicy } from '../src/sinks/field-policy.js';
import { PostgresDestination } from '../src/sinks/postgres/destination.js';
import { replicateOnce } from '../src/sinks/postgres/replicate.js';
import { copyLine, snapshotTables } from '../src/sinks/postgres/rows.js';
import { INDEXES, prepareSchema, TABLES } from '../src/sinks/postgres/schema.js';
import { startStandIn } from '../src/stand-in/index.js';
import { runSync } from '../src/sync/engine.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { startPostgresCluster } from '../test/support/postgres-cluster.js';

const USERS = Number(process.env.BENCH_POSTGRES_USERS ?? 100_000);

function mirrorBytes(db: Db, tables: readonly string[]): number {
  return (
    db
      .prepare<[string], number | null>(
        `SELECT sum(pgsize) FROM dbstat WHERE name IN (
           SELECT name FROM sqlite_schema WHERE tbl_name IN (SELECT value FROM json_each(?)))`,
      )
      .pluck()
      .get(JSON.stringify(tables)) ?? 0
  );
}

async function schemaBytes(client: pg.Client, schema: string): Promise<number> {
  const r = await client.query<{ b: string }>(
    `SELECT sum(pg_total_relation_size(c.oid))::bigint AS b FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname = ANY($2)`,
    [schema, [...TABLES]],
  );
  return Number(r.rows[0]?.b ?? 0);
}

const MB = (n: number) => (n / 1_048_576).toFixed(1);
const perS = (n: number, ms: number) => Math.round((n * 1000) / ms).toLocaleString('en');

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-postgres-'));
  const standIn = await startStandIn({ users: USERS, seed: 5, orgs: 0, membersPerOrg: 0 });
  const client = new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: standIn.apiKey, apiKeyHeader: standIn.apiKeyHeader });
  const mirrorPath = join(dir, 'mirror.db');
  const db = openMirror(mirrorPath);
  const writer = sqliteRunWriter(db);
  const cluster = await startPostgresCluster();
  const pgClient = new pg.Client({ connectionString: await cluster.createDatabase('bench') });
  const lines: string[] = [];
  try {
    process.stderr.write(`syncing ${USERS} users into the mirror\n`);
    if ((await runSync({ client, writer })).status !== 'succeeded') throw new Error('first sync failed');
    await pgClient.connect();
    const policy = compileFieldPolicy(undefined);
    const destination = new PostgresDestination(pgClient, 'sink', policy);
    await destination.ensureSchema();

    process.stderr.write('baseline by the sink\n');
    const snapshot = openMirrorSnapshot(mirrorPath);
    let started = performance.now();
    const counts = await destination.baseline(snapshot);
    const sinkMs = performance.now() - started;
    snapshot.close();
    const rows = Object.values(counts).reduce((a, b) => a + b, 0);

    // The same rows as files, for psql.
    const again = openMirrorSnapshot(mirrorPath);
    const files: Record<string, string> = {};
    const columns: Record<string, readonly string[]> = {};
    // The sink's own share of a baseline: reading the snapshot and writing COPY's text, without PostgreSQL.
    const encodeStarted = performance.now();
    for (const { table, columns: names, rows: tableRows } of snapshotTables(again, policy)) {
      files[table] = join(dir, `${table}.copy`);
      // Written in 1 MiB chunks: a million users' rows exceed the longest string V8 makes.
      const fd = openSync(files[table] ?? '', 'w', 0o600);
      try {
        let chunk = '';
        for (const v of tableRows()) {
          if (v === undefined) continue;
          chunk += copyLine(v);
          if (chunk.length >= 1_048_576) {
            writeSync(fd, chunk);
            chunk = '';
          }
        }
        writeSync(fd, chunk);
      } finally {
        closeSync(fd);
      }
      columns[table] = names;
    }
    again.close();
    const encodeMs = performance.now() - encodeStarted;
    await prepareSchema(pgClient, 'by_psql');
    const script = [
      'BEGIN;',
      `TRUNCATE ${TABLES.map((t) => `by_psql.${t}`).join(', ')};`,
      ...INDEXES.map((i) => `${i.drop('by_psql')};`),
      ...TABLES.map((t) => `\\copy by_psql.${t} (${columns[t]?.join(', ')}) FROM '${files[t]}'`),
      ...INDEXES.map((i) => `${i.create('by_psql')};`),
      'COMMIT;',
      `ANALYZE ${TABLES.map((t) => `by_psql.${t}`).join(', ')};`,
    ].join('\n');
    process.stderr.write('the same rows by psql \\copy\n');
    started = performance.now();
    const psql = spawnSync('psql', [cluster.url('bench'), '-X', '-q', '-v', 'ON_ERROR_STOP=1'], { input: script, encoding: 'utf8' });
    const psqlMs = performance.now() - started;
    if (psql.status !== 0) throw new Error(`psql: ${psql.stderr}`);

    // 1% of the users change upstream; one sync; one pass applies the feed.
    const d = standIn.directory;
    const listed = d.page(0, USERS);
    const changed = Math.round(USERS / 100);
    for (let i = 0; i < changed; i++) {
      const id = String(listed[(i * 97) % listed.length]?.user_id);
      d.update(id, i % 2 === 0 ? 'fallback_time_zone' : 'connected_sources');
    }
    if ((await runSync({ client, writer })).status !== 'succeeded') throw new Error('second sync failed');
    process.stderr.write('apply 1%\n');
    started = performance.now();
    const applied = await replicateOnce({ mirrorPath, destination, policyId: policy.id, batchEvents: 1_000 });
    const applyMs = performance.now() - started;

    const pgBytes = await schemaBytes(pgClient, 'sink');
    const liteBytes = mirrorBytes(db, ['users', 'connected_sources', 'user_versions', 'source_connections']);
    lines.push(
      `| users | rows loaded | sink baseline | psql \\copy | sink / psql | of which snapshot read + COPY text (no PostgreSQL) | apply 1% | PostgreSQL schema | mirror (same rows) | ratio |`,
      `|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|`,
      `| ${USERS.toLocaleString('en')} | ${rows.toLocaleString('en')} | ${(sinkMs / 1000).toFixed(1)} s, ${perS(rows, sinkMs)} rows/s | ` +
        `${(psqlMs / 1000).toFixed(1)} s, ${perS(rows, psqlMs)} rows/s | ${(psqlMs / sinkMs).toFixed(2)}× | ${(encodeMs / 1000).toFixed(1)} s | ` +
        `${applied.events.toLocaleString('en')} events in ${(applyMs / 1000).toFixed(2)} s, ${perS(applied.events, applyMs)} events/s | ` +
        `${MB(pgBytes)} MB | ${MB(liteBytes)} MB | ${(pgBytes / liteBytes).toFixed(2)}× |`,
    );
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await pgClient.end().catch(() => undefined);
    await cluster.stop();
    await client.close();
    db.close();
    await standIn.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
