/**
 * A mirror file lost under the running daemon (deleted or replaced) keeps
 * `status` at exit 1 naming it until a sync succeeds in the file now at
 * MIRROR_DB: a sync job of the old file that finishes after the loss was
 * recorded (it opened the file before) clears nothing, in Redis or in the
 * record beside the mirror.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildStatusReport, statusExitCode } from '../src/health/status-report.js';
import { formatStatusReport } from '../src/health/status-text.js';
import type { RunFacts, StatusFacts, SyncJobFacts } from '../src/health/status-facts.js';
import { lossMessage } from '../db/file-identity.js';
import { NO_CANDIDATES } from '../db/sync-runs.js';
import {
  attemptRecordPath,
  readAttemptRecord,
  recordCheckpoint,
  recordFailedAttempt,
  recordMirrorLoss,
  recordRunCheckpointedElsewhere,
} from '../src/sync/attempt-record.js';

const T = Date.parse('2026-11-28T05:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();
const REPLACED = lossMessage('/srv/m/mirror.db', 'replaced');

function run(id: number, status: RunFacts['status'], startedAt: number, finishedAt: number): RunFacts {
  return {
    id,
    status,
    startedAt: iso(startedAt),
    finishedAt: iso(finishedAt),
    usersSeen: 10,
    created: 0,
    updated: 0,
    deleted: 0,
    candidates: NO_CANDIDATES,
    anomalies: { identityConflicts: 0, oversizePages: 0, totalLowest: null },
    totalAtStart: 10,
    error: null,
  };
}

/** The facts at T+2 s: the loss recorded at T, the newest run in the file at MIRROR_DB, the newest finished sync job in Redis. */
function facts(runs: RunFacts[], lastSyncJob: SyncJobFacts | null, lost = true): StatusFacts {
  return {
    mirrorPath: '/srv/m/mirror.db',
    mirrorId: 'host',
    now: new Date(T + 2_000),
    scheduleIntervalMs: 60_000,
    staleAfterMs: 3_600_000,
    mirror: {
      available: true,
      activeUsers: 10,
      deletedUsers: 0,
      lastSucceededAt: new Date(T - 30_000),
      lastRuns: runs,
      failedRemovalsInAudit: undefined,
    },
    queues: {
      reachable: true,
      sync: { waiting: 0, active: 0, delayed: 0, failed: 0, completed: 3 },
      lastSyncJob,
      unboundRemovals: 0,
      removals: null,
      webhooks: null,
    },
    removalsConfigured: false,
    recordBeside: { at: iso(T), what: 'sync', reason: REPLACED, ...(lost ? { lost: { what: 'replaced' as const } } : {}) },
  };
}

// The file now at MIRROR_DB is a copy of the mirror taken before the loss: its newest run succeeded before T.
const copied = [run(3, 'succeeded', T - 31_000, T - 30_000)];

describe('status after the mirror file was replaced under the running daemon', () => {
  it('exits 1 naming the loss when a sync job of the old file succeeded at T+1, after the loss recorded at T', () => {
    const report = buildStatusReport(facts(copied, { finishedAt: iso(T + 1_000), failedReason: null }));
    expect(report.mirror.lastAttemptFailed).toEqual({ at: iso(T), reason: REPLACED, run: null });
    expect(statusExitCode(report)).toBe(1);
    expect(formatStatusReport(report)).toContain('was replaced by another file under the running daemon');
  });

  it('exits 1 when the old file run row, seen through the WAL left at the path, started before the loss and finished after it', () => {
    const report = buildStatusReport(facts([run(4, 'succeeded', T - 5_000, T + 1_000), ...copied], null));
    expect(report.mirror.lastAttemptFailed?.reason).toBe(REPLACED);
    expect(statusExitCode(report)).toBe(1);
  });

  it('clears once a run that started after the loss succeeded in the file now at MIRROR_DB', () => {
    const report = buildStatusReport(facts([run(4, 'succeeded', T + 500, T + 1_500), ...copied], null));
    expect(report.mirror.lastAttemptFailed).toBeNull();
    expect(statusExitCode(report)).toBe(0);
  });

  it('is not cleared by a run after it that failed', () => {
    const failed = { ...run(4, 'failed', T + 500, T + 1_500), error: 'the service answered 503' };
    const report = buildStatusReport(facts([failed, ...copied], null));
    expect(report.mirror.lastAttemptFailed?.reason).toBe(REPLACED);
    expect(statusExitCode(report)).toBe(1);
  });

  it('a failed sync record that is no loss is still outranked by a newer succeeded job (as before)', () => {
    const report = buildStatusReport(facts(copied, { finishedAt: iso(T + 1_000), failedReason: null }, false));
    expect(report.mirror.lastAttemptFailed).toBeNull();
    expect(statusExitCode(report)).toBe(0);
  });
});

describe('the loss recorded beside the mirror', () => {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-loss-record-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('outlives what the daemon that recorded it, and its sync children, write after it', () => {
    const mirror = join(dir, 'kept.db');
    recordMirrorLoss(mirror, 'replaced', REPLACED, new Date(T));
    recordCheckpoint(mirror, { walFrames: 12, copiedFrames: 12 }, new Date(T + 1_000));
    recordRunCheckpointedElsewhere(mirror, new Date(T + 1_000));
    recordFailedAttempt(mirror, 'sync', 'the daemon went away', new Date(T + 1_000));
    expect(readAttemptRecord(mirror)).toMatchObject({ at: iso(T), what: 'sync', reason: REPLACED, lost: { what: 'replaced' } });
  });

  it('is replaced by another process outcome (a restarted daemon run, a sync --once)', () => {
    const mirror = join(dir, 'replaced.db');
    recordMirrorLoss(mirror, 'deleted', lossMessage(mirror, 'deleted'), new Date(T));
    // As a daemon no longer running wrote it: another pid, neither ours nor our parent's.
    const path = attemptRecordPath(mirror);
    const theirs = { ...(JSON.parse(readFileSync(path, 'utf8')) as object), pid: 2 ** 22 + 1, host: hostname() };
    writeFileSync(path, JSON.stringify(theirs).padEnd(4_095, ' ') + '\n');
    recordCheckpoint(mirror, { walFrames: 3, copiedFrames: 3 }, new Date(T + 1_000));
    const record = readAttemptRecord(mirror);
    expect(record).toMatchObject({ at: iso(T + 1_000), what: 'ok' });
    expect(record?.lost).toBeUndefined();
  });
});
