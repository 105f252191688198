/**
 * Schema drift against real parts: a SQLite mirror written by the run writer
 * (counts per run, pairs met first, none for an unchanged re-sync), and a
 * daemon (its own redis-server, the stand-in serving records with a new
 * field and a date that is not one) whose /metrics, log and `status` say so.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../db/open.js';
import { newestRunDrift } from '../db/schema-drift.js';
import type { RunWriter } from '../src/sync/run-writer.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/cli-process.js';
import { daemonEnv, getStatus, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';
import { pageOf, useTempMirror, wireUser, type WireRecord } from './support/mirror-fixtures.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';

const drifting = (n: number, extra: WireRecord = {}): WireRecord =>
  wireUser(n, n % 2 === 0 ? { sleep_score: n, ...extra } : { ingestion_start: 'soon', ...extra });

describe('a mirror counts drift per run', () => {
  let db: Db;
  let writer: RunWriter;
  useTempMirror((m) => ({ db, writer } = m));

  function sync(records: WireRecord[]) {
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(records), 0);
    writer.publish(runId, { deletionsChecked: true, deletions: [] });
    return { runId, fresh: writer.finishRun(runId, { status: 'succeeded', pages: 1, usersSeen: records.length }) };
  }
  const counts = (runId: number) =>
    db.prepare('SELECT field, rule, records FROM run_field_warnings WHERE run_id = ? ORDER BY field').all(runId);

  it('announces a pair the first time only, counts the records each run writes, and nothing for an unchanged re-sync', () => {
    const first = sync([1, 2, 3, 4].map((n) => drifting(n)));
    expect(first.fresh).toEqual([
      { field: 'ingestion_start', rule: 'bad_format', records: 2 },
      { field: 'sleep_score', rule: 'new_field', records: 2 },
    ]);
    expect(counts(first.runId)).toEqual(first.fresh);

    // Users 1 and 2 change: counted again, not announced again.
    const second = sync([
      drifting(1, { created_on: '2026-01-01T00:00:00Z' }),
      drifting(2, { created_on: '2026-01-01T00:00:00Z' }),
      drifting(3),
      drifting(4),
    ]);
    expect(second.fresh).toEqual([]);
    expect(counts(second.runId)).toEqual([
      { field: 'ingestion_start', rule: 'bad_format', records: 1 },
      { field: 'sleep_score', rule: 'new_field', records: 1 },
    ]);
    expect(newestRunDrift(db)).toEqual({
      runId: second.runId,
      byRule: [
        { rule: 'bad_format', records: 1 },
        { rule: 'new_field', records: 1 },
      ],
      newPairs: [],
    });

    // Nothing changed: nothing parsed, nothing counted.
    const third = sync([
      drifting(1, { created_on: '2026-01-01T00:00:00Z' }),
      drifting(2, { created_on: '2026-01-01T00:00:00Z' }),
      drifting(3),
      drifting(4),
    ]);
    expect(counts(third.runId)).toEqual([]);
    expect(db.prepare('SELECT field, rule, first_run_id FROM schema_drift ORDER BY field').all()).toEqual([
      { field: 'ingestion_start', rule: 'bad_format', first_run_id: first.runId },
      { field: 'sleep_score', rule: 'new_field', first_run_id: first.runId },
    ]);
  });
});

describe('a daemon tells of drift', () => {
  let redis: TestRedis;
  let standIn: StandIn;
  let dir: string;
  let daemon: DaemonProcess | undefined;
  let statusPort: number;
  let env: Record<string, string>;

  beforeAll(async () => {
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, records: [1, 2, 3, 4, 5].map((n) => drifting(n)), seed: 7 });
    dir = mkdtempSync(join(tmpdir(), 'schema-drift-'));
    statusPort = await freePort();
    env = daemonEnv({ redisUrl: redis.url, standIn, mirrorDb: join(dir, 'mirror.db'), queuePrefix: `drift${Date.now()}`, statusPort });
    daemon = spawnDaemon(env);
    await daemon.ready;
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop();
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('counts the records on /metrics, logs each new pair once over several runs, and shows the run in status', async () => {
    // Three runs at least (the schedule is every 2 s): the later ones write nothing.
    const body = await eventually(
      async () => {
        const text = (await getStatus(statusPort, '/metrics')).body;
        return /^user_mirror_sync_runs_total\{status="succeeded"\} [3-9]/m.test(text) ? text : undefined;
      },
      90_000,
      () => `three synced runs; the daemon said: ${daemon?.text() ?? ''}`,
    );
    expect(body).toMatch(/^user_mirror_field_warnings_total\{field="sleep_score",rule="new_field"\} 2$/m);
    expect(body).toMatch(/^user_mirror_field_warnings_total\{field="ingestion_start",rule="bad_format"\} 3$/m);
    expect(body).toMatch(/^user_mirror_schema_drift_first_seen_timestamp_seconds\{field="sleep_score",rule="new_field"\} \d{10}/m);
    const drift = (daemon?.logs ?? []).filter((l) => l.event === 'sync.schema_drift');
    expect(
      drift
        .map((l) => ({ field: l.field, rule: l.rule, records: l.records }))
        .sort((a, b) => String(a.field).localeCompare(String(b.field))),
    ).toEqual([
      { field: 'ingestion_start', rule: 'bad_format', records: 3 },
      { field: 'sleep_score', rule: 'new_field', records: 2 },
    ]);
    expect(drift.every((l) => l.level === 40 && !JSON.stringify(l).includes('soon'))).toBe(true);

    const status = await runCli(['status', '--json'], env, 60_000);
    const report = JSON.parse(status.stdout) as { mirror: { schemaDrift: unknown } };
    // The newest run wrote nothing: no drift to show for it.
    expect(report.mirror.schemaDrift).toBeNull();
  });
});
