/**
 * The WAL as a figure: a reader that holds a read transaction open across
 * syncs keeps every checkpoint from finishing, and the WAL grows. `status`
 * shows its size against the mirror's and, past MIRROR_WAL_WARN_BYTES, says
 * why and exits 1; once the reader lets go, the next sync's checkpoint
 * empties it and `status` is well again. Real processes, real files.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { walVerdict } from '../src/health/wal-verdict.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/daemon-process.js';

let dir: string;
let standIn: StandIn;
let env: Record<string, string>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-wal-'));
  standIn = await startStandIn({ port: 0, users: 3_000, seed: 51 });
  env = {
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: join(dir, 'mirror.db'),
    MIRROR_WAL_WARN_BYTES: String(256 * 1024),
  };
});

afterAll(async () => {
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const churn = () => {
  for (const u of standIn.directory.page(0, 1_500)) standIn.directory.update(String(u.user_id));
};

describe('the WAL in status', () => {
  it('grows under a reader held across syncs: status names it and exits 1; after the reader ends, the next sync empties it', async () => {
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    const reader = new Database(env.MIRROR_DB ?? '', { readonly: true });
    try {
      // An analytics session that began a read and never ended it.
      reader.exec('BEGIN');
      reader.prepare('SELECT count(*) FROM users').get();
      for (let i = 0; i < 2; i++) {
        churn();
        expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
      }
      const wal = statSync(`${env.MIRROR_DB}-wal`).size;
      expect(wal).toBeGreaterThan(256 * 1024);
      const status = await runCli(['status'], env);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(
        /WAL TOO LARGE \d+(\.\d)? [KMG]B \(\d+\.\d× the mirror\), above 256 KB \(MIRROR_WAL_WARN_BYTES\): a read transaction held open/,
      );
      // The frames the reader held back from the last checkpoint, from the record the sync keeps beside the mirror.
      expect(status.stdout).toMatch(/^ {2}checkpoint {4}(\d+) of (\d+) WAL frames held back by a reader at /m);
      const json = JSON.parse((await runCli(['status', '--json'], env)).stdout) as {
        mirror: { wal: unknown; lastCheckpoint: { walFrames: number; copiedFrames: number } };
      };
      expect(json.mirror.wal).toMatchObject({ walBytes: wal, warnAtBytes: 256 * 1024, tooLarge: true });
      expect(json.mirror.lastCheckpoint.copiedFrames).toBeLessThan(json.mirror.lastCheckpoint.walFrames);
    } finally {
      reader.exec('COMMIT');
      reader.close();
    }
    churn();
    expect((await runCli(['sync', '--once'], env, 60_000)).code).toBe(0);
    const after = await runCli(['status'], env);
    expect(after.stdout).toMatch(/^ {2}wal {11}\d+ KB/m);
    expect(after.stdout).not.toContain('WAL TOO LARGE');
    expect(after.stdout).not.toContain('held back');
    expect(after.code).toBe(0);
  });

  it('by default the threshold is half the mirror, at least 64 MiB', () => {
    expect(walVerdict({ mirrorBytes: 10 * 2 ** 20, walBytes: 65 * 2 ** 20 }, undefined)).toMatchObject({
      warnAtBytes: 64 * 2 ** 20,
      tooLarge: true,
    });
    expect(walVerdict({ mirrorBytes: 400 * 2 ** 20, walBytes: 190 * 2 ** 20 }, undefined)).toMatchObject({
      warnAtBytes: 200 * 2 ** 20,
      tooLarge: false,
    });
    expect(walVerdict({ mirrorBytes: 400 * 2 ** 20, walBytes: 190 * 2 ** 20 }, 100)).toMatchObject({ tooLarge: true });
  });
});
