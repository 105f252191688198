import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MirrorDbError, openMirror, type Db } from '../db/open.js';
import { createRemovalAudit, type RemovalAudit } from '../db/removal-audit.js';
import { mergeFailedRemovals } from '../jobs/removals/failed.js';
import { createGroupCommit } from '../db/group-commit.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { auditLocation, openAudit } from '../db/open-audit.js';
import { busyRetryDelay, retryWhileBusy } from '../db/busy-retry.js';
import { auditPathFor } from '../db/audit-location.js';

const ORG = '3f6c1a52-8a3e-4b8e-9d2a-0c6f7e1b2a90';
const MEMBER = '9b2d4e61-1c7f-4a0b-8e3d-5f6a7b8c9d0e';
/** The worker's management target (jobs/removals/contract.ts). */
const T = '0123456789abcdef';
const ref = { jobId: 'job-1', enqueuedAt: Date.parse('2026-01-01T00:00:00Z') };
const at = (s: number) => new Date(ref.enqueuedAt + s * 1000);

let db: Db;
let audit: RemovalAudit;
beforeEach(() => {
  db = openAudit(':memory:');
  audit = createRemovalAudit(db);
});
afterEach(() => db.close());

describe('member_removals audit', () => {
  it('is a STRICT table of the audit file, whose rows name their target (audit migration 2)', () => {
    const sql = db.prepare<[], { sql: string }>("SELECT sql FROM sqlite_master WHERE name = 'member_removals'").get()?.sql ?? '';
    expect(sql).toMatch(/STRICT/);
    expect(db.pragma('user_version', { simple: true })).toBeGreaterThanOrEqual(2);
  });

  it('records request, attempts and success', () => {
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER, requested_by: 'ops', reason: 'left' }, at(1));
    expect(audit.get('job-1')).toMatchObject({
      status: 'requested',
      attempts: 1,
      requests: 1,
      requested_by: 'ops',
      reason: 'left',
      finished_at: null,
    });
    audit.attemptFailed(ref, 'HTTP 503', false, at(2));
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(3));
    audit.finished(ref, 'succeeded', at(4));
    expect(audit.get('job-1')).toMatchObject({
      status: 'succeeded',
      attempts: 2,
      last_error: 'HTTP 503',
      requested_at: '2026-01-01T00:00:00.000Z',
      finished_at: at(4).toISOString(),
    });
  });

  it('a re-run after a crash does not downgrade succeeded to already_absent', () => {
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(1));
    audit.finished(ref, 'succeeded', at(2));
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(3));
    audit.finished(ref, 'already_absent', at(4));
    expect(audit.get('job-1')).toMatchObject({ status: 'succeeded', attempts: 2, finished_at: at(2).toISOString() });
  });

  it('a final failure, then a manual retry that succeeds', () => {
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(1));
    audit.attemptFailed(ref, 'permanent failure: HTTP 403', true, at(2));
    expect(audit.get('job-1')).toMatchObject({ status: 'failed', finished_at: at(2).toISOString() });
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(3));
    expect(audit.get('job-1')).toMatchObject({ status: 'requested', finished_at: null });
    audit.finished(ref, 'already_absent', at(4));
    expect(audit.get('job-1')).toMatchObject({ status: 'already_absent', attempts: 2 });
  });

  it('a rejected payload is a failed row with what could be read of it', () => {
    audit.rejected(ref, { target: T, org_id: 'x'.repeat(10_000), member_id: 5 }, 'invalid payload: org_id: must be a UUID', at(1));
    const row = audit.get('job-1');
    expect(row).toMatchObject({ status: 'failed', member_id: null, last_error: 'invalid payload: org_id: must be a UUID' });
    expect(row?.org_id?.length).toBeLessThanOrEqual(101);
  });

  it('counts collapsed duplicates once per event, before or after the row exists', () => {
    expect(audit.duplicate('1-1', 'job-1', 'dedup', at(1))).toBe(true);
    expect(audit.duplicate('1-1', 'job-1', 'dedup', at(1))).toBe(false);
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(2));
    expect(audit.get('job-1')?.requests).toBe(2);
    audit.duplicate('2-0', 'job-1', 'dedup', at(3));
    expect(audit.get('job-1')?.requests).toBe(3);
  });

  it('keeps jobs apart when BullMQ ids restart with a new Redis', () => {
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER }, at(1));
    audit.started({ jobId: 'job-1', enqueuedAt: ref.enqueuedAt + 99_000 }, { target: T, org_id: ORG, member_id: ORG }, at(100));
    expect(audit.list()).toHaveLength(2);
    expect(audit.get('job-1')?.member_id).toBe(ORG);
  });

  it('rejects an unknown status', () => {
    expect(() =>
      db
        .prepare(
          "INSERT INTO member_removals (job_id, enqueued_at, org_id, member_id, status, requested_at, updated_at) VALUES ('j', 1, 'o', 'm', 'done', 'x', 'x')",
        )
        .run(),
    ).toThrow(/CHECK/);
  });
});

describe('mergeFailedRemovals', () => {
  it('joins the failed set with the audit, and lists audit-only failures too', () => {
    audit.started(ref, { target: T, org_id: ORG, member_id: MEMBER, requested_by: 'ops' }, at(1));
    audit.attemptFailed(ref, 'HTTP 403', true, at(2));
    const gone = { jobId: 'job-0', enqueuedAt: ref.enqueuedAt - 1000 };
    audit.started(gone, { target: T, org_id: ORG, member_id: ORG }, at(0));
    audit.attemptFailed(gone, 'HTTP 401', true, at(0));
    const merged = mergeFailedRemovals(
      [
        {
          id: 'job-1',
          data: { org_id: ORG, member_id: MEMBER },
          attemptsMade: 1,
          failedReason: 'permanent failure: HTTP 403',
          finishedOn: at(2).getTime(),
          timestamp: ref.enqueuedAt,
          processedBy: 'host-a:123',
        },
      ],
      audit.list({ status: 'failed' }),
    );
    expect(merged).toEqual([
      expect.objectContaining({
        job_id: 'job-1',
        requested_by: 'ops',
        reason: 'permanent failure: HTTP 403',
        in_queue: true,
        host: 'host-a',
      }),
      expect.objectContaining({ job_id: 'job-0', reason: 'HTTP 401', in_queue: false }),
    ]);
  });
});

describe('group commit', () => {
  it('runs writes submitted together in one transaction, each resolving once committed', async () => {
    const transactions: number[] = [];
    const committed: string[] = [];
    const group = createGroupCommit(
      (body) => {
        const before = committed.length;
        body();
        transactions.push(committed.length - before);
      },
      { windowMs: 5 },
    );
    const writes = ['a', 'b', 'c'].map((k) => group.submit(() => committed.push(k)));
    expect(committed).toEqual([]);
    await Promise.all(writes);
    expect(committed).toEqual(['a', 'b', 'c']);
    expect(transactions).toEqual([3]);
  });

  it('a failing write rejects only its own promise', async () => {
    const group = createGroupCommit((body) => db.transaction(body)());
    const insert = (id: string) => () => audit.started({ jobId: id, enqueuedAt: 1 }, { target: T, org_id: ORG, member_id: MEMBER });
    const results = await Promise.allSettled([
      group.submit(insert('a')),
      group.submit(() => {
        throw new Error('disk full');
      }),
      group.submit(insert('b')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(audit.get('a')?.attempts).toBe(1);
    expect(audit.get('b')?.attempts).toBe(1);
  });

  it('flushes at once when the batch is full', async () => {
    let transactions = 0;
    const group = createGroupCommit(
      (body) => {
        transactions++;
        body();
      },
      { windowMs: 60_000, maxBatch: 2 },
    );
    await Promise.all([group.submit(() => undefined), group.submit(() => undefined)]);
    expect(transactions).toBe(1);
  });
});

/** An error as better-sqlite3 throws it when the file's write lock stays taken. */
function busyError(): Error {
  return Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
}

describe('busy audit file', () => {
  it('a batch that meets a busy file rejects every write at once, without retrying each one', async () => {
    let transactions = 0;
    const group = createGroupCommit(() => {
      transactions += 1;
      throw busyError();
    });
    const results = await Promise.allSettled([group.submit(() => undefined), group.submit(() => undefined), group.submit(() => undefined)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(transactions).toBe(1);
  });

  it('retries busy writes with growing waits until they land; other errors at once', async () => {
    let calls = 0;
    const waits: number[] = [];
    const value = await retryWhileBusy(
      async () => {
        calls += 1;
        if (calls < 4) throw busyError();
        return 'landed';
      },
      { firstDelayMs: 1, onRetry: ({ delayMs }) => waits.push(delayMs) },
    );
    expect(value).toBe('landed');
    expect(waits).toEqual([1, 2, 4]);
    await expect(retryWhileBusy(() => Promise.reject(new Error('no such table')))).rejects.toThrow('no such table');
    await expect(retryWhileBusy(() => Promise.reject(busyError()), { budgetMs: 30, firstDelayMs: 5 })).rejects.toThrow(
      'database is locked',
    );
  });

  it('waits double, are capped, and never run past the deadline', () => {
    expect([1, 2, 3, 4, 5, 6, 7].map((n) => busyRetryDelay(n, 50, 2_000, 60_000))).toEqual([50, 100, 200, 400, 800, 1_600, 2_000]);
    expect(busyRetryDelay(3, 50, 2_000, 120)).toBe(120);
  });
});

describe('the audit file (AUDIT_DB)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-audit-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('defaults to a file next to the mirror, and may not be the mirror itself', () => {
    expect(auditPathFor('./data/mirror.db')).toBe('./data/mirror-audit.db');
    expect(auditPathFor('/var/lib/um/users.sqlite')).toBe('/var/lib/um/users-audit.db');
    expect(auditLocation({ MIRROR_DB: './data/mirror.db', AUDIT_DB: undefined })).toBe('./data/mirror-audit.db');
    expect(auditLocation({ MIRROR_DB: './data/mirror.db', AUDIT_DB: '/srv/audit.db' })).toBe('/srv/audit.db');
    expect(() => auditLocation({ MIRROR_DB: './data/mirror.db', AUDIT_DB: 'data/../data/mirror.db' })).toThrow(MirrorDbError);
  });

  it('has its own schema: the audit tables and nothing of the mirror', () => {
    const a = openAudit(join(dir, 'audit.db'));
    try {
      const tables = a.prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
      expect(tables.map((t) => t.name)).toEqual(['legacy_audit_import', 'member_removal_duplicates', 'member_removals']);
      expect(a.pragma('user_version', { simple: true })).toBe(2);
    } finally {
      a.close();
    }
  });

  it("copies an older version's rows out of the mirror file once", () => {
    const mirrorPath = join(dir, 'mirror.db');
    const mirror = openMirror(mirrorPath);
    const old = olderVersionAudit(mirror);
    old.started(ref, { org_id: ORG, member_id: MEMBER, requested_by: 'ops' }, at(1));
    old.finished(ref, 'succeeded', at(2));
    old.duplicate('1-0', 'job-1', 'dedup', at(1));
    old.started({ jobId: 'job-2', enqueuedAt: ref.enqueuedAt }, { org_id: ORG, member_id: MEMBER }, at(3));
    mirror.close();

    const auditPath = auditPathFor(mirrorPath);
    const first = openAudit(auditPath, { legacyMirror: mirrorPath });
    const copied = createRemovalAudit(first);
    expect(copied.get('job-1')).toMatchObject({ status: 'succeeded', requests: 2, requested_by: 'ops', finished_at: at(2).toISOString() });
    expect(copied.list().map((r) => r.job_id)).toEqual(['job-2', 'job-1']);
    expect(first.prepare('SELECT source, removals, duplicates FROM legacy_audit_import').get()).toEqual({
      source: mirrorPath,
      removals: 2,
      duplicates: 1,
    });
    copied.finished({ jobId: 'job-2', enqueuedAt: ref.enqueuedAt }, 'already_absent', at(4));
    first.close();

    // Opening again copies nothing: job-2 keeps the outcome written since.
    const again = openAudit(auditPath, { legacyMirror: mirrorPath });
    try {
      expect(createRemovalAudit(again).list()).toHaveLength(2);
      expect(createRemovalAudit(again).get('job-2')).toMatchObject({ status: 'already_absent' });
    } finally {
      again.close();
    }
  });

  it("copies while a sync holds the mirror's write lock (a second daemon starting beside a running one)", () => {
    const mirrorPath = join(dir, 'mirror.db');
    const mirror = openMirror(mirrorPath);
    const old = olderVersionAudit(mirror);
    old.started(ref, { org_id: ORG, member_id: MEMBER }, at(1));
    // The running sync: the mirror's write lock, held for the whole scan.
    mirror.exec('BEGIN IMMEDIATE');
    mirror.prepare("INSERT INTO sync_runs (started_at, status) VALUES ('2026-01-01T00:00:00.000Z', 'running')").run();
    try {
      const a = openAudit(join(dir, 'audit.db'), { legacyMirror: mirrorPath });
      try {
        expect(a.prepare('SELECT source, removals FROM legacy_audit_import').get()).toEqual({ source: mirrorPath, removals: 1 });
        expect(createRemovalAudit(a).get('job-1')).toMatchObject({ status: 'requested' });
      } finally {
        a.close();
      }
    } finally {
      mirror.exec('ROLLBACK');
      mirror.close();
    }
  });

  it('with no older rows, records that there was nothing to copy', () => {
    const a = openAudit(join(dir, 'audit.db'), { legacyMirror: join(dir, 'absent.db') });
    try {
      expect(a.prepare('SELECT source, removals FROM legacy_audit_import').get()).toEqual({ source: null, removals: 0 });
    } finally {
      a.close();
    }
  });
});

/**
 * What an older version wrote into the mirror file's own member_removals
 * (mirror migration 2, which has no target column): started, finished and
 * collapsed duplicates, as its audit did.
 */
function olderVersionAudit(mirror: Db) {
  return {
    started(r: { jobId: string; enqueuedAt: number }, f: { org_id: string; member_id: string; requested_by?: string }, when: Date): void {
      mirror
        .prepare(
          `INSERT INTO member_removals (job_id, enqueued_at, org_id, member_id, status, attempts, requests, requested_by, requested_at, started_at, updated_at)
           VALUES (?, ?, ?, ?, 'requested', 1, 1, ?, ?, ?, ?)`,
        )
        .run(
          r.jobId,
          r.enqueuedAt,
          f.org_id,
          f.member_id,
          f.requested_by ?? null,
          new Date(r.enqueuedAt).toISOString(),
          when.toISOString(),
          when.toISOString(),
        );
    },
    finished(r: { jobId: string; enqueuedAt: number }, status: string, when: Date): void {
      mirror
        .prepare('UPDATE member_removals SET status = ?, finished_at = ?, updated_at = ? WHERE job_id = ? AND enqueued_at = ?')
        .run(status, when.toISOString(), when.toISOString(), r.jobId, r.enqueuedAt);
    },
    duplicate(eventId: string, jobId: string, dedupId: string, when: Date): void {
      mirror
        .prepare('INSERT INTO member_removal_duplicates (event_id, job_id, dedup_id, seen_at) VALUES (?, ?, ?, ?)')
        .run(eventId, jobId, dedupId, when.toISOString());
      mirror.prepare('UPDATE member_removals SET requests = requests + 1 WHERE job_id = ?').run(jobId);
    },
  };
}
