/**
 * The verdicts `status` adds for what the logs say (src/health/status-findings.ts), pure:
 * rejected records and standing identity conflicts of the newest published run, an audit
 * that cannot be written, webhook delivery past WEBHOOK_LAG_WARN_SECONDS; each makes exit 1.
 */
import { describe, expect, it } from 'vitest';
import type { RunFindings } from '../db/run-findings.js';
import { auditReport, conflictReport, rejectedReport, webhookLagVerdict } from '../src/health/status-findings.js';
import { statusExitCode, type StatusReport } from '../src/health/status-report.js';

const clean: RunFindings = {
  runId: 7,
  finishedAt: null,
  rejected: 0,
  rejectedRecords: [],
  conflicts: 0,
  standing: 0,
  standingConflicts: [],
};

function report(mirror: Partial<StatusReport['mirror']>, audit: StatusReport['audit'] = null): StatusReport {
  return {
    mirror: { path: 'm.db', id: 'x', available: true, stale: false, lastAttemptFailed: null, checkpointFailed: null, ...mirror },
    audit,
    backups: null,
    schedule: { intervalSeconds: 900 },
    queues: { reachable: false, error: 'off' },
    failedRemovals: { queue: null, audit: null },
    removalQueue: null,
    removalsConfigured: false,
    changeFeed: null,
    webhooks: null,
    webhooksConfigured: false,
  };
}

describe('status findings', () => {
  it('a clean run is exit 0; a rejected record is exit 1, its ids truncated', () => {
    expect(statusExitCode(report({ rejectedRecords: rejectedReport(clean) }))).toBe(0);
    const long = 'c'.repeat(10_000);
    const r = rejectedReport({
      ...clean,
      rejected: 1,
      rejectedRecords: [{ offset: 0, index: 1, userId: null, clientUserId: long, reason: 'x' }],
    });
    expect(r?.records[0]?.clientUserId).toBe(`${'c'.repeat(80)}… (10000 characters)`);
    expect(statusExitCode(report({ rejectedRecords: r }))).toBe(1);
  });

  it('conflicts the mirror since answers are shown, not judged; standing ones are exit 1', () => {
    const settled = conflictReport({ ...clean, conflicts: 2, standing: 0 });
    expect(statusExitCode(report({ identityConflicts: settled }))).toBe(0);
    const standing = conflictReport({
      ...clean,
      conflicts: 1,
      standing: 1,
      standingConflicts: [{ kind: 'user_id', userId: 'u', earlier: 'alias', later: 'real' }],
    });
    expect(statusExitCode(report({ identityConflicts: standing }))).toBe(1);
  });

  it('an unwritable audit is exit 1 where it exists or removals run here', () => {
    const problem = { path: '/a', exists: true, problem: '/a: the disk is full (0 bytes free)' };
    expect(statusExitCode(report({}, auditReport(problem, false)))).toBe(1);
    expect(statusExitCode(report({}, auditReport({ ...problem, exists: false }, false)))).toBe(0);
    expect(statusExitCode(report({}, auditReport({ ...problem, exists: false }, true)))).toBe(1);
    expect(statusExitCode(report({}, auditReport({ ...problem, problem: undefined }, true)))).toBe(0);
  });

  it('webhook lag past the bound is lagging (default 300 s)', () => {
    expect(webhookLagVerdict(301, null, undefined)).toMatchObject({ lagging: true, lagWarnSeconds: 300 });
    expect(webhookLagVerdict(300, null, undefined).lagging).toBe(false);
    expect(webhookLagVerdict(5, { eventId: 'evt_1_1', cursor: 1, attempts: 3, last: 'no answer within 1000 ms' }, 4)).toMatchObject({
      lagging: true,
      retrying: { attempts: 3 },
    });
  });
});
