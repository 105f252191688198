/**
 * The pure decisions behind the full-disk and lost-mirror reports: the
 * disk's state against MIRROR_DISK_WARN_BYTES, status's exit code and words
 * (the disk blamed, not a reader, for a WAL left uncopied on a full disk),
 * and a file's identity judged. No I/O.
 */
import { describe, expect, it } from 'vitest';
import { diskVerdict } from '../src/health/disk-verdict.js';
import { buildStatusReport, statusExitCode } from '../src/health/status-report.js';
import { formatStatusReport } from '../src/health/status-text.js';
import type { StatusFacts } from '../src/health/status-facts.js';
import { judgeIdentity, lossMessage } from '../db/file-identity.js';
import { FULL_BELOW_BYTES } from '../db/disk-space.js';

const GiB = 1024 * 1024 * 1024;
const now = new Date('2026-11-28T05:00:00Z');

function facts(disk: StatusFacts['disk'], checkpoint?: { walFrames: number; copiedFrames: number }): StatusFacts {
  return {
    mirrorPath: '/srv/m/mirror.db',
    mirrorId: 'host',
    now,
    scheduleIntervalMs: 900_000,
    staleAfterMs: 3_600_000,
    mirror: {
      available: true,
      activeUsers: 10,
      deletedUsers: 0,
      lastSucceededAt: new Date(now.getTime() - 60_000),
      lastRuns: [],
      failedRemovalsInAudit: undefined,
      files: { mirrorBytes: 200 * 1024 * 1024, walBytes: 0 },
    },
    queues: { reachable: false, error: 'not asked' },
    removalsConfigured: false,
    disk,
    ...(checkpoint === undefined
      ? {}
      : { recordBeside: { at: now.toISOString(), what: 'ok' as const, reason: '', checkpoint: { at: now.toISOString(), ...checkpoint } } }),
  };
}

describe('the disk holding the mirror', () => {
  it('is full below 1 MiB free, low below MIRROR_DISK_WARN_BYTES, else ok', () => {
    expect(diskVerdict({ freeBytes: 0, totalBytes: GiB }, GiB).state).toBe('full');
    expect(diskVerdict({ freeBytes: FULL_BELOW_BYTES - 1, totalBytes: GiB }, 0).state).toBe('full');
    expect(diskVerdict({ freeBytes: FULL_BELOW_BYTES, totalBytes: GiB }, 0).state).toBe('ok');
    expect(diskVerdict({ freeBytes: GiB - 1, totalBytes: 10 * GiB }, GiB).state).toBe('low');
    expect(diskVerdict({ freeBytes: GiB, totalBytes: 10 * GiB }, GiB).state).toBe('ok');
  });

  it('makes status exit 1 when low or full, and 0 with room', () => {
    const exit = (free: number) => statusExitCode(buildStatusReport(facts(diskVerdict({ freeBytes: free, totalBytes: 10 * GiB }, GiB))));
    expect(exit(5 * GiB)).toBe(0);
    expect(exit(GiB / 2)).toBe(1);
    expect(exit(0)).toBe(1);
  });

  it('names the full file system, and blames it rather than a reader for WAL frames not copied', () => {
    const full = formatStatusReport(
      buildStatusReport(facts(diskVerdict({ freeBytes: 0, totalBytes: GiB }, GiB), { walFrames: 100, copiedFrames: 40 })),
    );
    expect(full).toContain('DISK FULL     the file system holding MIRROR_DB (/srv/m/mirror.db) is full: 0 bytes free');
    expect(full).toContain('checkpoint    60 of 100 WAL frames not copied at');
    expect(full).not.toContain('held back by a reader');
    const roomy = formatStatusReport(
      buildStatusReport(facts(diskVerdict({ freeBytes: 5 * GiB, totalBytes: 10 * GiB }, GiB), { walFrames: 100, copiedFrames: 40 })),
    );
    expect(roomy).toContain('60 of 100 WAL frames held back by a reader');
    expect(roomy).toMatch(/ {2}disk {10}5\.00 GB free of 10\.00 GB/);
  });

  it('blames the disk for a WAL too large while it is low', () => {
    const f = facts(diskVerdict({ freeBytes: 100 * 1024 * 1024, totalBytes: GiB }, GiB));
    if (f.mirror.available) f.mirror.files = { mirrorBytes: 200 * 1024 * 1024, walBytes: 150 * 1024 * 1024 };
    const text = formatStatusReport(buildStatusReport(f));
    expect(text).toMatch(/WAL TOO LARGE .*the file system holding MIRROR_DB \(\/srv\/m\/mirror\.db\) has only 100\.0 MB free/);
    expect(text).not.toContain('a read transaction held open');
    expect(text).toContain('DISK LOW');
  });
});

describe('the mirror file under the daemon', () => {
  it('is the same file, deleted, or replaced', () => {
    const opened = { dev: 2049, ino: 77 };
    expect(judgeIdentity(opened, { dev: 2049, ino: 77 })).toBeUndefined();
    expect(judgeIdentity(opened, undefined)).toBe('deleted');
    expect(judgeIdentity(opened, { dev: 2049, ino: 78 })).toBe('replaced');
    expect(judgeIdentity(opened, { dev: 2050, ino: 77 })).toBe('replaced');
    expect(lossMessage('/srv/m/mirror.db', 'replaced')).toMatch(
      /^MIRROR_DB \(\/srv\/m\/mirror\.db\) was replaced by another file under the running daemon/,
    );
  });
});
