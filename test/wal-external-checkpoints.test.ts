/**
 * MIRROR_CHECKPOINTS=external, the mode for Litestream: user-mirror never
 * checkpoints the WAL (neither after a sync nor before the next), and the
 * WAL figures stay honest. A checkpoint that is not ours copies the WAL
 * without shrinking the file, so `status` and /metrics measure what the WAL
 * index says is not yet copied, not the file's size: the warning fires while
 * nobody checkpoints, and stops once somebody did, though the file is as
 * large as before. Real processes, real files; the checkpoint that stands
 * for Litestream's is a PASSIVE one, as Litestream's usual one is (the real
 * Litestream: test/litestream-replica.test.ts).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/daemon/metrics.js';
import { readWalIndex } from '../db/wal-index.js';
import { readAttemptRecord } from '../src/sync/attempt-record.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';

let dir: string;
let standIn: StandIn;
let env: Record<string, string>;
let mirror: string;
/** Stands for Litestream's connection: open all along, so no closing connection of ours is the last one. */
let holder: Database.Database;

const WARN = 256 * 1024;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-wal-external-'));
  standIn = await startStandIn({ port: 0, users: 3_000, seed: 53 });
  mirror = join(dir, 'mirror.db');
  env = {
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: mirror,
    MIRROR_CHECKPOINTS: 'external',
    MIRROR_WAL_WARN_BYTES: String(WARN),
    REDIS_URL: 'redis://127.0.0.1:1',
  };
  expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
  // SQLite opens lazily: one read makes the connection hold its lock on the file, as Litestream's does.
  holder = new Database(mirror);
  holder.prepare('SELECT count(*) FROM sqlite_master').get();
  for (const u of standIn.directory.page(0, 1_500)) standIn.directory.update(String(u.user_id));
  expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
}, 120_000);

afterAll(async () => {
  holder?.close();
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Wal {
  walBytes: number;
  warnAtBytes: number;
  tooLarge: boolean;
  checkpoints: string;
  pendingBytes: number;
  frames: number;
  backfilledFrames: number;
}

async function status(): Promise<{ code: number | null; text: string; wal: Wal }> {
  const text = await runCli(['status'], env);
  const json = await runCli(['status', '--json'], env);
  return { code: text.code, text: text.stdout, wal: (JSON.parse(json.stdout) as { mirror: { wal: Wal } }).mirror.wal };
}

async function gauges(): Promise<string> {
  const metrics = createMetrics({ defaultMetrics: false });
  metrics.setSources({
    files: () => ({ mirrorBytes: statSync(mirror).size, walBytes: statSync(`${mirror}-wal`).size, walIndex: readWalIndex(mirror) }),
    checkpoints: 'external',
  });
  return metrics.registry.metrics();
}

describe('MIRROR_CHECKPOINTS=external', () => {
  it('a sync leaves every frame in the WAL: no checkpoint of ours, and no checkpoint figures of ours beside the mirror', () => {
    const index = readWalIndex(mirror);
    expect(index?.frames).toBeGreaterThan(0);
    expect(index?.backfilledFrames).toBe(0);
    const record = readAttemptRecord(mirror);
    expect(record).toMatchObject({ what: 'ok' });
    expect(record?.checkpoint).toBeUndefined();
  });

  it('while nobody checkpoints, status measures the WAL not yet copied, names it, asks after Litestream and exits 1; /metrics says the same', async () => {
    const s = await status();
    const index = readWalIndex(mirror);
    expect(s.wal).toMatchObject({
      checkpoints: 'external',
      tooLarge: true,
      warnAtBytes: WARN,
      frames: index?.frames,
      backfilledFrames: 0,
      pendingBytes: index?.pendingBytes,
    });
    expect(s.wal.pendingBytes).toBeGreaterThan(WARN);
    expect(s.code).toBe(1);
    expect(s.text).toMatch(
      /WAL TOO LARGE \d+(\.\d)? [KMG]B not yet copied into the mirror \(\d+ of \d+ frames\), above 256 KB \(MIRROR_WAL_WARN_BYTES\), checkpoints external \(MIRROR_CHECKPOINTS=external\): no checkpoint copies it; is Litestream running\?/,
    );
    const text = await gauges();
    expect(text).toContain(`user_mirror_wal_pending_bytes ${index?.pendingBytes}`);
    expect(text).toContain('user_mirror_checkpoints_external 1');
  });

  it("once Litestream's kind of checkpoint copied it, the WAL file is as large as before and status is well: no warning from the file's size", async () => {
    const sizeBefore = statSync(`${mirror}-wal`).size;
    const r = holder.pragma('wal_checkpoint(PASSIVE)') as Array<{ busy: number; log: number; checkpointed: number }>;
    expect(r[0]?.checkpointed).toBe(r[0]?.log);
    expect(statSync(`${mirror}-wal`).size).toBe(sizeBefore);
    expect(sizeBefore).toBeGreaterThan(WARN);

    const s = await status();
    expect(s.wal).toMatchObject({ checkpoints: 'external', tooLarge: false, walBytes: sizeBefore, pendingBytes: 0 });
    expect(s.code).toBe(0);
    expect(s.text).toMatch(/^ {2}wal {11}0 KB not yet copied into the mirror \(0 of \d+ frames\), file .*, checkpoints external/m);
    expect(await gauges()).toContain('user_mirror_wal_pending_bytes 0');

    // The same file judged by its size, as when user-mirror checkpoints: too large.
    const afterSync = await runCli(['status', '--json'], { ...env, MIRROR_CHECKPOINTS: 'after-sync' });
    expect((JSON.parse(afterSync.stdout) as { mirror: { wal: Wal } }).mirror.wal).toMatchObject({
      checkpoints: 'after-sync',
      tooLarge: true,
    });
  });

  it('a value that is neither mode is a configuration error naming the variable', async () => {
    const r = await runCli(['sync', '--once'], { ...env, MIRROR_CHECKPOINTS: 'litestream' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('MIRROR_CHECKPOINTS: must be after-sync or external');
  });
});
