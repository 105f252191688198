/**
 * The pure decisions behind what restores leave and what `status` says of
 * them (src/health/restore-files.ts, status-text.ts): which names beside the
 * mirror are killed restores' copies or replaced files, which copies a
 * restore may remove (only those whose pid does not run), what to stop when
 * Litestream holds the mirror, the restore line, and a read-only mount
 * judged before its bytes free. No I/O.
 */
import { describe, expect, it } from 'vitest';
import { classifyRestoreFiles, holdersAdvice, restoreFileKind, splitLeftovers, stampTime } from '../src/health/restore-files.js';
import { diskVerdict } from '../src/health/disk-verdict.js';
import { buildStatusReport, statusExitCode } from '../src/health/status-report.js';
import { formatStatusReport } from '../src/health/status-text.js';
import type { StatusFacts } from '../src/health/status-facts.js';

const DB = '/srv/m/mirror.db';
const MiB = 1024 * 1024;

describe('the files restores leave beside the mirror', () => {
  it('tells a restore copy (by pid), a replaced file (by stamp), their companions, and anything else apart', () => {
    expect(restoreFileKind('mirror.db.restoring-4242', DB)).toEqual({ kind: 'restoring', pid: 4242 });
    expect(restoreFileKind('mirror.db.restoring-4242-wal', DB)).toEqual({ kind: 'companion' });
    expect(restoreFileKind('mirror.db.replaced-20261128T051500123Z', DB)).toEqual({ kind: 'replaced', at: '2026-11-28T05:15:00.123Z' });
    expect(restoreFileKind('mirror.db.replaced-20261128T051500123Z-wal', DB)).toEqual({ kind: 'companion' });
    for (const other of ['mirror.db', 'mirror.db-wal', 'other.db.restoring-1', 'mirror.db.restoring-x', 'mirror.db.replaced-yesterday'])
      expect(restoreFileKind(other, DB), other).toBeUndefined();
    expect(stampTime('20261399T000000000Z')).toBeUndefined();
  });

  it('counts each with its companions; the oldest replaced file by its stamp', () => {
    const sizes: Record<string, number> = {
      'mirror.db.restoring-7': 266 * MiB,
      'mirror.db.restoring-7-wal': 4 * MiB,
      'mirror.db.replaced-20261128T060000000Z': 100 * MiB,
      'mirror.db.replaced-20261128T060000000Z-wal': 1 * MiB,
      'mirror.db.replaced-20261127T060000000Z': 90 * MiB,
      'mirror.db': 120 * MiB,
    };
    const found = classifyRestoreFiles(Object.keys(sizes), DB, (p) => sizes[p.slice('/srv/m/'.length)] ?? 0);
    expect(found.leftovers).toEqual([{ path: '/srv/m/mirror.db.restoring-7', pid: 7, bytes: 270 * MiB }]);
    expect(found.replaced).toEqual({
      count: 2,
      bytes: 191 * MiB,
      oldest: { path: '/srv/m/mirror.db.replaced-20261127T060000000Z', at: '2026-11-27T06:00:00.000Z' },
    });
    expect(classifyRestoreFiles(['mirror.db'], DB, () => 1).replaced).toBeNull();
  });

  it('removes only the copies whose pid does not run', () => {
    const l = (pid: number) => ({ path: `${DB}.restoring-${pid}`, pid, bytes: 1 });
    const split = splitLeftovers([l(1), l(2), l(3)], (pid) => pid === 2);
    expect(split.dead.map((x) => x.pid)).toEqual([1, 3]);
    expect(split.live.map((x) => x.pid)).toEqual([2]);
  });

  it('advises stopping Litestream when it holds the mirror, the daemon when something else does', () => {
    const litestream = { pid: 9, command: '/usr/bin/litestream replicate -config /etc/litestream.yml', path: DB };
    const daemon = { pid: 10, command: 'node dist/cli.js daemon', path: DB };
    const alone = holdersAdvice(DB, [litestream]);
    expect(alone).toMatch(/pid 9 \(\/usr\/bin\/litestream replicate.*\): stop Litestream/);
    expect(alone).not.toContain('pm2');
    expect(holdersAdvice(DB, [daemon])).toMatch(/pid 10 .*: stop the daemon .*\(pm2 stop user-mirror\), then restore$/);
    const both = holdersAdvice(DB, [litestream, daemon]);
    expect(both).toContain('stop Litestream');
    expect(both).toContain('pm2 stop user-mirror');
    // A path that merely contains the word is not Litestream.
    expect(holdersAdvice(DB, [{ pid: 11, command: 'sqlite3 /srv/litestream-notes.db', path: DB }])).not.toContain('stop Litestream');
  });
});

const now = new Date('2026-11-28T05:00:00Z');

function facts(over: Partial<StatusFacts> = {}, restore?: NonNullable<Extract<StatusFacts['mirror'], { available: true }>['restore']>) {
  const f: StatusFacts = {
    mirrorPath: DB,
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
      restore,
    },
    queues: { reachable: false, error: 'refused' },
    removalsConfigured: false,
    ...over,
  };
  return buildStatusReport(f);
}

describe('status after restores', () => {
  const restore = {
    at: '2026-11-28T04:00:00.000Z',
    backupAt: '2026-11-28T03:07:00.000Z',
    backupCursor: 1200,
    cursorBase: 1764300000000000,
    replacedCursor: 1450,
    backupRunId: 41,
    gapTo: null,
    restores: 2,
  };

  it('names the newest restore, the cursors lost and the history gap; not judged', () => {
    const r = facts({}, restore);
    const text = formatStatusReport(r);
    expect(text).toContain(
      'restored      2026-11-28T04:00:00.000Z from the backup taken 2026-11-28T03:07:00.000Z (its last published run #41); 2 restores in all',
    );
    expect(text).toContain('cursors 1201–1450 the replaced file issued are lost (a consumer past 1200 is told to resume there)');
    expect(text).toContain('history gap 2026-11-28T03:07:00.000Z – the next sync');
    expect(statusExitCode(r)).toBe(0);
    expect(formatStatusReport(facts({}, { ...restore, replacedCursor: null }))).toContain(
      'the replaced file could not be read: cursors after 1200 it may have issued are lost',
    );
    expect(formatStatusReport(facts())).not.toContain('restored');
  });

  it('names leftovers and replaced files, without judging them', () => {
    const r = facts({
      restoreFiles: {
        leftovers: [
          { path: `${DB}.restoring-7`, pid: 7, bytes: 266 * MiB, running: false },
          { path: `${DB}.restoring-8`, pid: 8, bytes: 80 * MiB, running: true },
        ],
        replaced: {
          count: 10,
          bytes: 1.8 * 1024 * MiB,
          oldest: { path: `${DB}.replaced-20261127T060000000Z`, at: '2026-11-27T06:00:00.000Z' },
        },
      },
    });
    const text = formatStatusReport(r);
    expect(text).toContain(
      `LEFTOVER        ${DB}.restoring-7 (266.0 MB) of restore pid 7, which no longer runs (killed): the next restore removes it`,
    );
    expect(text).toContain(`restore copy    ${DB}.restoring-8 (80.0 MB): restore pid 8 still runs`);
    expect(text).toContain('replaced files  10 kept beside the mirror, 1.80 GB, the oldest from 2026-11-27T06:00:00.000Z');
    expect(statusExitCode(r)).toBe(0);
  });

  it('a read-only mount is read-only whatever its bytes free say, and needs attention', () => {
    const ro = diskVerdict({ freeBytes: 100 * MiB, totalBytes: 1024 * MiB, readOnly: true }, 1024 * MiB);
    expect(ro.state).toBe('read-only');
    expect(diskVerdict({ freeBytes: 0, totalBytes: 1024 * MiB, readOnly: true }, 0).state).toBe('read-only');
    const r = facts({ disk: ro });
    const text = formatStatusReport(r);
    expect(text).toContain(`READ-ONLY     the file system holding MIRROR_DB (${DB}) is mounted read-only`);
    expect(text).not.toContain('DISK LOW');
    expect(statusExitCode(r)).toBe(1);
  });
});
