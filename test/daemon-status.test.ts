/**
 * The status endpoint and the metrics registry in-process (no Redis: the
 * sources are fakes), the status report, and the shutdown signal handling.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { createMetrics } from '../src/daemon/metrics.js';
import { startStatusServer, type ReadinessReport, type StatusServer } from '../src/daemon/status-server.js';
import { buildStatusReport, statusExitCode } from '../src/health/status-report.js';
import type { QueueFacts, StatusFacts, SyncJobFacts } from '../src/health/status-facts.js';
import { formatStatusReport } from '../src/health/status-text.js';
import { assessStaleness, staleAfterMs } from '../src/health/staleness.js';
import { handleShutdownSignals, SECOND_SIGNAL_EXIT_CODE } from '../src/daemon/shutdown.js';
import type { SyncSummary } from '../src/sync/run-summary.js';

let server: StatusServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const summary = (over: Partial<SyncSummary>): SyncSummary =>
  ({
    runId: 1,
    status: 'succeeded',
    pages: 3,
    pageFailures: 0,
    usersSeen: 1200,
    created: 5,
    updated: 2,
    deleted: 1,
    rejected: 0,
    totalAtStart: 1200,
    totalAtEnd: 1200,
    durationMs: 1500,
    ...over,
  }) as SyncSummary;

describe('status server', () => {
  it('answers healthz always, readyz by the readiness report, metrics as Prometheus text', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    let report: ReadinessReport = { ready: false, checks: { phase: 'starting', db: 'ok', redis: 'ECONNREFUSED' } };
    server = await startStatusServer({
      host: '127.0.0.1',
      port: 0,
      registry: metrics.registry,
      readiness: async () => report,
      logger: silentLogger,
    });
    const url = (p: string) => `http://127.0.0.1:${server?.port}${p}`;

    expect((await fetch(url('/healthz'))).status).toBe(200);
    const notReady = await fetch(url('/readyz'));
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toEqual(report);
    report = { ready: true, checks: { phase: 'ok', db: 'ok', redis: 'ok' } };
    expect((await fetch(url('/readyz'))).status).toBe(200);

    const m = await fetch(url('/metrics'));
    expect(m.status).toBe(200);
    expect(m.headers.get('content-type')).toContain('text/plain');
    expect(await m.text()).toContain('# TYPE user_mirror_sync_runs_total counter');

    expect((await fetch(url('/nope'))).status).toBe(404);
    expect((await fetch(url('/metrics'), { method: 'POST' })).status).toBe(405);
  });

  it('refuses to start on a port that is taken', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    server = await startStatusServer({
      host: '127.0.0.1',
      port: 0,
      registry: metrics.registry,
      readiness: async () => ({ ready: true, checks: {} }),
      logger: silentLogger,
    });
    await expect(
      startStatusServer({
        host: '127.0.0.1',
        port: server.port,
        registry: metrics.registry,
        readiness: async () => ({ ready: true, checks: {} }),
        logger: silentLogger,
      }),
    ).rejects.toThrow(/EADDRINUSE/);
  });
});

describe('metrics', () => {
  it('counts events and reads state on scrape', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.recordSync({ outcome: 'ran', summary: summary({}) });
    metrics.recordSync({ outcome: 'ran', summary: summary({ status: 'failed', pages: 0, created: 0, updated: 0, deleted: 0 }) });
    metrics.recordSync({ outcome: 'skipped', reason: 'lease-held', heldBy: { host: 'h', pid: 1, acquiredAt: 0 } });
    metrics.recordHttp({ method: 'GET', route: '/v2/user/', status: 200, durationMs: 12 });
    metrics.recordHttp({ method: 'GET', route: '/v2/user/', status: 0, durationMs: 10_000 });
    metrics.recordRemoval('succeeded');
    metrics.recordRemoval('retrying');
    metrics.recordWorkerRestart('sync', 'not-running');
    metrics.setSources({
      mirror: () => ({
        activeUsers: 1200,
        deletedUsers: 3,
        lastSucceededAt: new Date('2025-01-01T00:00:00Z'),
        lastProblem: undefined,
        running: undefined,
      }),
      queues: async () => [
        { queue: 'sync', state: 'wait', count: 1 },
        { queue: 'removals', state: 'failed', count: 4 },
      ],
      redisUp: async () => true,
      files: () => ({ mirrorBytes: 4096, walBytes: 8192 }),
      checkpoint: () => ({ walFrames: 900, copiedFrames: 250, failed: false }),
      lastAttemptFailed: () => true,
    });
    const text = await metrics.registry.metrics();
    for (const line of [
      'user_mirror_sync_runs_total{status="succeeded"} 1',
      'user_mirror_sync_runs_total{status="failed"} 1',
      'user_mirror_sync_runs_total{status="skipped"} 1',
      'user_mirror_sync_pages_fetched_total 3',
      'user_mirror_sync_user_changes_total{change="created"} 5',
      'user_mirror_sync_last_success_timestamp_seconds 1735689600',
      'user_mirror_users{state="active"} 1200',
      'user_mirror_users{state="deleted"} 3',
      'user_mirror_http_responses_total{method="GET",route="/v2/user/",status="200"} 1',
      'user_mirror_http_responses_total{method="GET",route="/v2/user/",status="0"} 1',
      'user_mirror_removal_jobs_total{outcome="succeeded"} 1',
      'user_mirror_removal_jobs_total{outcome="retrying"} 1',
      'user_mirror_worker_restarts_total{worker="sync",reason="not-running"} 1',
      'user_mirror_queue_jobs{queue="sync",state="wait"} 1',
      'user_mirror_queue_jobs{queue="removals",state="failed"} 4',
      'user_mirror_redis_up 1',
      'user_mirror_file_bytes{file="wal"} 8192',
      'user_mirror_checkpoint_frames_held 650',
      'user_mirror_checkpoint_failed 0',
      // MIRROR_WAL_WARN_BYTES unset: the default, half the mirror but at least 64 MiB.
      'user_mirror_wal_warn_bytes 67108864',
      'user_mirror_sync_last_attempt_failed 1',
    ]) {
      expect(text).toContain(line);
    }
  });

  it('serves every known label set of its counters at 0 before anything happened, and each watched worker for every reason', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.watchWorkers(['sync']);
    const text = await metrics.registry.metrics();
    for (const line of [
      'user_mirror_sync_runs_total{status="partial"} 0',
      'user_mirror_sync_runs_total{status="skipped"} 0',
      'user_mirror_sync_duration_seconds_count{status="failed"} 0',
      'user_mirror_sync_user_changes_total{change="deleted"} 0',
      'user_mirror_removal_jobs_total{outcome="already_absent"} 0',
      'user_mirror_webhook_deliveries_total{outcome="delivered"} 0',
      'user_mirror_worker_restarts_total{worker="sync",reason="not-running"} 0',
      'user_mirror_worker_restarts_total{worker="sync",reason="idle-with-waiting-jobs"} 0',
      'user_mirror_worker_restarts_total{worker="sync",reason="overdue-job"} 0',
    ])
      expect(text).toContain(line);
    // Only the workers the watchdog watches: no removals series without a removal worker.
    expect(text).not.toContain('worker="removals"');
  });

  it('answers promptly when Redis hangs: redis_up 0 and no queue gauges', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.setSources({ queues: () => new Promise(() => undefined), redisUp: () => new Promise(() => undefined) });
    const t0 = Date.now();
    const text = await metrics.registry.metrics();
    expect(Date.now() - t0).toBeLessThan(4_000);
    expect(text).toContain('user_mirror_redis_up 0');
    expect(text).not.toMatch(/^user_mirror_queue_jobs\{/m);
  });
});

const NONE_MISSING = { candidates: 0, confirmedGone: 0, stillThere: 0, unverified: 0, deferred: 0 };
const NO_ANOMALIES = { identityConflicts: 0, oversizePages: 0, totalLowest: 10 };

describe('status report', () => {
  const facts = (over: Partial<StatusFacts> = {}): StatusFacts => ({
    mirrorPath: '/data/mirror.db',
    mirrorId: 'host-a',
    now: new Date('2025-01-01T01:00:00Z'),
    scheduleIntervalMs: 15 * 60_000,
    staleAfterMs: 45 * 60_000,
    removalsConfigured: true,
    mirror: {
      available: true,
      activeUsers: 10,
      deletedUsers: 2,
      lastSucceededAt: new Date('2025-01-01T00:50:00Z'),
      lastRuns: [
        {
          id: 2,
          status: 'failed',
          startedAt: '2025-01-01T00:55:00.000Z',
          finishedAt: '2025-01-01T00:55:01.000Z',
          usersSeen: 0,
          created: 0,
          updated: 0,
          deleted: 0,
          candidates: NONE_MISSING,
          anomalies: NO_ANOMALIES,
          totalAtStart: null,
          error: 'first page failed:\nHTTP 503',
        },
        {
          id: 1,
          status: 'succeeded',
          startedAt: '2025-01-01T00:49:00.000Z',
          finishedAt: '2025-01-01T00:50:00.000Z',
          usersSeen: 10,
          created: 10,
          updated: 0,
          deleted: 0,
          candidates: { candidates: 5, confirmedGone: 3, stillThere: 1, unverified: 1, deferred: 0 },
          anomalies: NO_ANOMALIES,
          totalAtStart: 10,
          error: null,
        },
      ],
      failedRemovalsInAudit: 1,
      lastProblem: { runId: 2, status: 'failed', at: '2025-01-01T00:55:01.000Z', reason: 'first page failed:\nHTTP 503' },
    },
    queues: {
      reachable: true,
      sync: { waiting: 0, active: 1, delayed: 0, failed: 2, completed: 9 },
      removals: {
        target: { id: '0123456789abcdef', url: 'https://management.example.com', queue: 'member-removals-0123456789abcdef' },
        counts: { waiting: 3, active: 0, delayed: 1, failed: 1, completed: 5 },
        hosts: [{ host: 'host-a', total: 5, outcomes: { succeeded: 5 } }],
      },
      unboundRemovals: 0,
    },
    ...over,
  });

  /** The same estate after the failed run #2 was followed by a good one: the last attempt did not fail. */
  const recovered = (over: Partial<StatusFacts> = {}): StatusFacts => {
    const f = facts(over);
    return f.mirror.available
      ? { ...f, mirror: { ...f.mirror, lastRuns: f.mirror.lastRuns.filter((run) => run.status === 'succeeded') } }
      : f;
  };

  it('works out age and staleness against SYNC_STALE_AFTER_MS, with the last failure as the reason', () => {
    const r = buildStatusReport(recovered());
    expect(r.mirror).toMatchObject({
      available: true,
      ageSeconds: 600,
      stale: false,
      staleAfterSeconds: 2700,
      staleReason: null,
      activeUsers: 10,
    });
    expect(r.failedRemovals).toEqual({ queue: 1, audit: 1 });
    expect(statusExitCode(r)).toBe(0);
    // Two missed intervals are not stale yet; past three they are.
    expect(buildStatusReport(facts({ now: new Date('2025-01-01T01:30:00Z') })).mirror.stale).toBe(false);
    // The last attempt failed (run #2): attention, though the mirror is fresh.
    const failedLast = buildStatusReport(facts());
    expect(failedLast.mirror.lastAttemptFailed).toEqual({ at: '2025-01-01T00:55:01.000Z', reason: 'first page failed:\nHTTP 503', run: 2 });
    expect(statusExitCode(failedLast)).toBe(1);
    expect(formatStatusReport(failedLast)).toContain('LAST SYNC FAILED (run #2) at 2025-01-01T00:55:01.000Z: first page failed: HTTP 503');
    const old = buildStatusReport(facts({ now: new Date('2025-01-01T01:36:00Z') }));
    expect(old.mirror).toMatchObject({ stale: true, ageSeconds: 2760 });
    expect(old.mirror.staleReason).toBe(
      'last successful sync 46m ago, more than SYNC_STALE_AFTER_MS (45m); last failed run #2 (2025-01-01T00:55:01.000Z): first page failed: HTTP 503',
    );
    expect(formatStatusReport(old)).toContain('STALE         last successful sync 46m ago');
    expect(statusExitCode(old)).toBe(1);
  });

  it('still reports the mirror when Redis is unreachable, and asks for attention', () => {
    const r = buildStatusReport(facts({ queues: { reachable: false, error: 'connect ECONNREFUSED 127.0.0.1:6379' } }));
    expect(statusExitCode(r)).toBe(1);
    expect(r.failedRemovals).toEqual({ queue: null, audit: 1 });
    const text = formatStatusReport(r);
    expect(text).toContain('10 active, 2 deleted');
    expect(text).toContain('redis unreachable (connect ECONNREFUSED 127.0.0.1:6379)');
    expect(text).toContain('1 in the audit');
  });

  it('does not judge Redis for a sync-only estate (no MANAGEMENT_URL), and does where removals run', () => {
    const down = { reachable: false as const, error: 'connect ECONNREFUSED 127.0.0.1:6379' };
    expect(statusExitCode(buildStatusReport(recovered({ removalsConfigured: false, queues: down })))).toBe(0);
    expect(statusExitCode(buildStatusReport(facts({ removalsConfigured: true, queues: down })))).toBe(1);
    // The mirror still decides for a sync-only estate.
    const stale = facts({ removalsConfigured: false, queues: down });
    const old = buildStatusReport({ ...stale, now: new Date('2025-01-02T01:00:00Z') });
    expect(statusExitCode(old)).toBe(1);
  });

  it('a failing webhook endpoint needs attention: exit 1, and says since when and what it answered', () => {
    const webhooks = (endpoint: { since: string; last: string } | null) =>
      recovered({
        removalsConfigured: false,
        webhooksConfigured: true,
        queues: {
          reachable: true,
          sync: { waiting: 0, active: 0, delayed: 0, failed: 0, completed: 1 },
          removals: null,
          unboundRemovals: 0,
          webhooks: {
            target: { id: 'fedcba9876543210', url: 'http://hooks.example.com/in', queue: 'webhooks-host-a-fedcba9876543210' },
            counts: { waiting: 1009, active: 1, delayed: 0, failed: 0, completed: 0 },
            dispatched: 1010,
            settled: 0,
            endpoint,
          },
        },
      });
    expect(statusExitCode(buildStatusReport(webhooks(null)))).toBe(0);
    const failing = buildStatusReport(webhooks({ since: '2025-01-01T00:40:00.000Z', last: 'status 301' }));
    expect(statusExitCode(failing)).toBe(1);
    expect(failing.webhooks?.endpointFailing).toEqual({ since: '2025-01-01T00:40:00.000Z', last: 'status 301' });
    expect(formatStatusReport(failing)).toContain(
      'webhooks        ENDPOINT FAILING since 2025-01-01T00:40:00.000Z (status 301): every event held, none lost; fix WEBHOOK_URL or the receiver',
    );
  });

  it("a sync that failed without a run row (the daemon's failed job is newer) is the last attempt, named, exit 1", () => {
    const queues = (lastSyncJob: SyncJobFacts): QueueFacts => ({
      reachable: true,
      sync: { waiting: 0, active: 0, delayed: 0, failed: 1, completed: 9 },
      lastSyncJob,
      removals: null,
      unboundRemovals: 0,
    });
    const full = { finishedAt: '2025-01-01T00:58:00.000Z', failedReason: '/data/mirror.db: database or disk is full (SQLITE_FULL)' };
    const r = buildStatusReport({ ...recovered(), queues: queues(full) });
    expect(r.mirror.lastAttemptFailed).toEqual({
      at: '2025-01-01T00:58:00.000Z',
      reason: '/data/mirror.db: database or disk is full (SQLITE_FULL)',
      run: null,
    });
    expect(formatStatusReport(r)).toContain(
      'LAST SYNC FAILED (no run recorded) at 2025-01-01T00:58:00.000Z: /data/mirror.db: database or disk is full',
    );
    expect(statusExitCode(r)).toBe(1);
    // A newer completed job (a sync that worked since) clears it; so does a failed job that is run #2's own failure.
    const later = { finishedAt: '2025-01-01T00:59:00.000Z', failedReason: null };
    expect(buildStatusReport({ ...recovered(), queues: queues(later) }).mirror.lastAttemptFailed).toBeNull();
    const own = { finishedAt: '2025-01-01T00:55:02.000Z', failedReason: 'sync run 2 failed: first page failed' };
    expect(buildStatusReport({ ...facts(), queues: queues(own) }).mirror.lastAttemptFailed?.run).toBe(2);
  });

  it('renders runs one per line, errors flattened', () => {
    const text = formatStatusReport(buildStatusReport(facts()));
    expect(text).toContain('first page failed: HTTP 503');
    expect(text).toMatch(/sync +waiting 0 +active 1 +delayed 0 +failed 2 +completed 9/);
    expect(text.split('\n').filter((l) => l.startsWith('    #')).length).toBe(2);
    expect(text).toContain('missing 5 (3 gone, 1 still there, 1 unchecked)');
    expect(text).not.toContain('ANOMALIES');
  });

  it("shows the file's size and its free pages, which later syncs reuse", () => {
    const base = facts();
    if (!base.mirror.available) throw new Error('fixture mirror must be available');
    const files = { mirrorBytes: 40 * 2 ** 20, walBytes: 0, freeBytes: 3 * 2 ** 20 };
    const r = buildStatusReport({ ...base, mirror: { ...base.mirror, files } });
    expect(r.mirror.freeBytes).toBe(3 * 2 ** 20);
    expect(formatStatusReport(r)).toMatch(/^ {2}file {10}40\.0 MB, 3\.0 MB of it free pages that later syncs reuse$/m);
  });

  it("shows a run's anomalies under its line", () => {
    const base = facts();
    if (!base.mirror.available) throw new Error('fixture mirror must be available');
    const [failed, good] = base.mirror.lastRuns;
    if (failed === undefined || good === undefined) throw new Error('fixture has two runs');
    const odd = { ...good, anomalies: { identityConflicts: 2, oversizePages: 1, totalLowest: 0 } };
    const text = formatStatusReport(buildStatusReport({ ...base, mirror: { ...base.mirror, lastRuns: [failed, odd] } }));
    expect(text).toMatch(
      /#1 .*\n +ANOMALIES 2 identity conflict\(s\) \(the later listing won; .*\); 1 page\(s\) larger than the limit asked; total fell from 10 to 0 during the scan/,
    );
  });
  it('counts users with field warnings and folds list indices in the top fields', () => {
    const base = facts();
    if (!base.mirror.available) throw new Error('fixture mirror must be available');
    const byField = [
      { field: 'ingestion_start', users: 3 },
      { field: 'connected_sources[0].provider', users: 2 },
      { field: 'connected_sources[3].provider', users: 2 },
      { field: 'created_on', users: 1 },
    ];
    const r = buildStatusReport({ ...base, mirror: { ...base.mirror, fieldWarnings: { users: 5, byField } } });
    expect(r.mirror.fieldWarnings).toEqual({
      usersWithWarnings: 5,
      topFields: [
        { field: 'connected_sources[].provider', count: 4 },
        { field: 'ingestion_start', count: 3 },
        { field: 'created_on', count: 1 },
      ],
    });
    expect(formatStatusReport(r)).toContain('field warnings 5 users (connected_sources[].provider 4, ingestion_start 3, created_on 1)');
    expect(buildStatusReport(base).mirror.fieldWarnings).toBeNull();
  });
});

describe('staleness', () => {
  const at = (iso: string) => new Date(iso);
  it('defaults to three schedule intervals, or SYNC_STALE_AFTER_MS when set', () => {
    expect(staleAfterMs(undefined, 15 * 60_000)).toBe(45 * 60_000);
    expect(staleAfterMs(10_000, 15 * 60_000)).toBe(10_000);
  });

  it('calls a never-synced mirror stale and names a run that is still running', () => {
    const s = assessStaleness({
      lastSucceededAt: undefined,
      lastProblem: { runId: 1, status: 'partial', at: '2025-01-01T00:10:00.000Z', reason: 'listing incomplete' },
      running: { runId: 2, status: 'running', at: '2025-01-01T00:20:00.000Z', reason: null },
      now: at('2025-01-01T01:00:00Z'),
      staleAfterMs: 60_000,
    });
    expect(s).toEqual({
      stale: true,
      ageSeconds: null,
      staleAfterSeconds: 60,
      sourceAgeSeconds: null,
      reason:
        'never synced successfully; last partial run #1 (2025-01-01T00:10:00.000Z): listing incomplete; run #2 running since 2025-01-01T00:20:00.000Z',
    });
  });

  it('says so when nothing has run since the last success', () => {
    const s = assessStaleness({
      lastSucceededAt: at('2025-01-01T00:00:00Z'),
      lastProblem: undefined,
      running: undefined,
      now: at('2025-01-01T03:00:00Z'),
      staleAfterMs: 3_600_000,
    });
    expect(s.reason).toBe('last successful sync 3h ago, more than SYNC_STALE_AFTER_MS (60m); no sync has run since');
  });

  it('is exported as gauges', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const figures = { activeUsers: 1, deletedUsers: 0, lastProblem: undefined, running: undefined };
    let last: Date | undefined = new Date(Date.now() - 120_000);
    metrics.setSources({ mirror: () => ({ ...figures, lastSucceededAt: last }), staleAfterMs: 60_000 });
    const text = await metrics.registry.metrics();
    expect(text).toContain('user_mirror_mirror_stale 1');
    expect(text).toMatch(/^user_mirror_mirror_age_seconds 12\d$/m);
    expect(text).toContain('user_mirror_mirror_stale_after_seconds 60');
    last = undefined;
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await metrics.registry.metrics()).toContain('user_mirror_mirror_age_seconds +Inf');
  });
});

describe('handleShutdownSignals', () => {
  it('stops once on the first signal and exits with its code; a second signal exits 130 at once', async () => {
    const exits: number[] = [];
    let stops = 0;
    let finish: (code: number) => void = () => undefined;
    const off = handleShutdownSignals({
      logger: silentLogger,
      timeoutMs: 10_000,
      signals: ['SIGUSR2'],
      exit: (code) => exits.push(code),
      stop: () => {
        stops++;
        return new Promise<number>((resolve) => (finish = resolve));
      },
    });
    try {
      process.emit('SIGUSR2', 'SIGUSR2');
      expect(stops).toBe(1);
      process.emit('SIGUSR2', 'SIGUSR2');
      expect(exits).toEqual([SECOND_SIGNAL_EXIT_CODE]);
      finish(0);
      await new Promise((r) => setImmediate(r));
      expect(exits).toEqual([SECOND_SIGNAL_EXIT_CODE, 0]);
      expect(stops).toBe(1);
    } finally {
      off();
    }
  });

  it('exits 1 if the stop overruns its budget', async () => {
    const exits: number[] = [];
    const off = handleShutdownSignals({
      logger: silentLogger,
      timeoutMs: 10,
      signals: ['SIGUSR2'],
      exit: (code) => exits.push(code),
      stop: () => new Promise<number>(() => undefined),
    });
    try {
      process.emit('SIGUSR2', 'SIGUSR2');
      await new Promise((r) => setTimeout(r, 5_200));
      expect(exits).toEqual([1]);
    } finally {
      off();
    }
  });
});
