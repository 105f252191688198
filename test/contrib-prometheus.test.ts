/**
 * contrib/prometheus against real parts: promtool (Debian's `prometheus`
 * package, unpacked by .ci/run without installing a server) checks the alert
 * rules and runs their unit tests, a running daemon (a child process with
 * its own redis-server, the stand-in and a webhook receiver, removals and
 * webhooks configured so that every metric family is served) is scraped,
 * and every metric a rule or a dashboard panel queries must be one it
 * serves; `promtool check metrics` must accept the whole of what it serves,
 * and of what `user-mirror serve` serves on the replica's port. Its first
 * scrape must already hold every counter series whose labels are known, at 0.
 *
 * Where promtool cannot be had, the tests that need it say NOT RUN in their
 * names; the checks that need only the files and the daemon run regardless.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { daemonEnv, getStatus, ROOT, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { startCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';

const CONTRIB = join(ROOT, 'contrib', 'prometheus');
const RULES = join(CONTRIB, 'user-mirror.rules.yml');
const RULE_TESTS = join(CONTRIB, 'user-mirror.rules.test.yml');
const DASHBOARD = join(CONTRIB, 'user-mirror.dashboard.json');
/** The runbooks: one heading per alert, which each rule's runbook_url names. */
const ALERTS_PAGE = join(ROOT, 'docs', 'alerts.md');

/** Series Prometheus makes itself for every target, not served by the daemon: `up` (UserMirrorDown). */
const PROMETHEUS_OWN = ['up'];

/** promtool: $PROMTOOL, the copy .ci/run unpacks into .ci/tools/, or one on PATH; else why not. */
function findPromtool(): { path: string; version: string } | { missing: string } {
  const candidates = [process.env.PROMTOOL, join(ROOT, '.ci', 'tools', 'prometheus', 'usr', 'bin', 'promtool'), 'promtool'];
  for (const path of candidates) {
    if (path === undefined || path === '') continue;
    if (path.includes('/') && !existsSync(path)) continue;
    const r = spawnSync(path, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return { path, version: (r.stdout + r.stderr).split('\n')[0] ?? '' };
  }
  return { missing: 'promtool not found: neither $PROMTOOL, .ci/tools/prometheus (unpacked by .ci/run) nor PATH has it' };
}

const PROMTOOL = findPromtool();
const notRun = 'missing' in PROMTOOL ? `NOT RUN (${PROMTOOL.missing}): ` : '';

function promtool(args: string[], input?: string): { status: number | null; output: string } {
  if ('missing' in PROMTOOL) throw new Error(PROMTOOL.missing);
  const r = spawnSync(PROMTOOL.path, args, { encoding: 'utf8', cwd: CONTRIB, ...(input === undefined ? {} : { input }) });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

interface Alert {
  alert: string;
  expr: string;
  annotations: Record<string, string>;
}

/**
 * The alerts of the rules file, read by the shape this file is written in
 * (`- alert:` then `expr:` on one line, annotations a folded block each);
 * promtool reads it properly, this only has to find what to compare.
 */
function readAlerts(): Alert[] {
  const text = readFileSync(RULES, 'utf8');
  const blocks = text.split(/\n(?= {6}- alert: )/).slice(1);
  return blocks.map((b) => {
    const alert = /- alert: (\S+)/.exec(b)?.[1] ?? '';
    const expr = /\n {8}expr: (.+)/.exec(b)?.[1] ?? '';
    const annotations: Record<string, string> = {};
    for (const m of b.matchAll(/^ {10}(summary|description|runbook_url): (?:>-\n((?: {12}.*\n?)+)|(.+))/gm)) {
      annotations[m[1] ?? ''] = (m[2] ?? m[3] ?? '').replace(/\s+/g, ' ').trim();
    }
    return { alert, expr, annotations };
  });
}

/** Every PromQL query of the dashboard: panel targets and template variables, with where each is. */
function dashboardQueries(): Array<{ where: string; expr: string }> {
  const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
    panels: Array<{ title: string; targets?: Array<{ expr: string }>; panels?: unknown[] }>;
    templating: { list: Array<{ name: string; type: string; query?: { query: string } | string }> };
  };
  const out: Array<{ where: string; expr: string }> = [];
  for (const p of dash.panels) for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}"`, expr: t.expr });
  for (const v of dash.templating.list) {
    if (v.type !== 'query' || v.query === undefined) continue;
    const q = typeof v.query === 'string' ? v.query : v.query.query;
    out.push({ where: `variable $${v.name}`, expr: q.replace(/^label_values\((.*),\s*\w+\)$/, '$1') });
  }
  return out;
}

const PROMQL_WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset']);

/** The metric names a PromQL expression reads: identifiers left once strings, matchers, ranges, label lists and calls are set aside. */
function metricsOf(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = [...bare.matchAll(/(?<![\w$.:])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()/g)].map((m) => m[1] ?? '');
  return [...new Set(names.filter((n) => !PROMQL_WORDS.has(n) && !/^(Inf|NaN)$/i.test(n)))];
}

/** What a GitHub-style renderer makes of a heading for its anchor. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\w\- ]/g, '')
    .replace(/ /g, '-');
}

describe('contrib/prometheus: the alert rules', () => {
  const alerts = readAlerts();

  it('every alert has an expression, a summary, a description and a runbook in docs/alerts.md', () => {
    expect(alerts.length).toBe((readFileSync(RULES, 'utf8').match(/- alert: /g) ?? []).length);
    const anchors = new Set(
      [...readFileSync(ALERTS_PAGE, 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map((m) => `docs/alerts.md#${slug(m[1] ?? '')}`),
    );
    const problems = alerts.flatMap((a) => [
      ...(a.expr === '' ? [`${a.alert}: no expr`] : []),
      ...['summary', 'description', 'runbook_url'].filter((k) => !a.annotations[k]).map((k) => `${a.alert}: no ${k}`),
      ...(anchors.has(a.annotations.runbook_url ?? '') ? [] : [`${a.alert}: runbook ${a.annotations.runbook_url} is no heading`]),
    ]);
    expect(problems).toEqual([]);
  });

  it('covers what the issue asks for', () => {
    const queried = new Set(alerts.flatMap((a) => metricsOf(a.expr)));
    for (const m of [
      'user_mirror_mirror_stale',
      'user_mirror_sync_last_attempt_failed',
      'user_mirror_webhook_endpoint_failing',
      'user_mirror_webhook_seconds_behind',
      'user_mirror_removals_held',
      'user_mirror_queue_jobs',
      'user_mirror_redis_up',
      'user_mirror_wal_warn_bytes',
      'user_mirror_checkpoint_failed',
      'user_mirror_disk_free_bytes',
      'user_mirror_backup_last_failed',
      'user_mirror_backup_stale',
      'user_mirror_sink_failing',
      'user_mirror_sink_seconds_behind',
      'user_mirror_export_last_failed',
      'user_mirror_export_stale',
    ])
      expect(queried, m).toContain(m);
  });

  it(`${notRun}promtool check rules accepts the rules file`, () => {
    if ('missing' in PROMTOOL) return;
    const r = promtool(['check', 'rules', RULES]);
    expect(r.output).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status, r.output).toBe(0);
  });

  it(`${notRun}promtool test rules: each alert fires where it should, with its annotations, and stays quiet on a healthy daemon`, () => {
    if ('missing' in PROMTOOL) return;
    const r = promtool(['test', 'rules', RULE_TESTS]);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toContain('SUCCESS');
    // Every alert has a test where it fires.
    const tests = readFileSync(RULE_TESTS, 'utf8');
    const untested = alerts.filter((a) => !new RegExp(`alertname: ${a.alert}\\n\\s+exp_alerts:\\n\\s+- exp_labels`).test(tests));
    expect(untested.map((a) => a.alert)).toEqual([]);
  });

  it(`${notRun}every dashboard query is valid PromQL (promtool check rules, as recording rules)`, () => {
    if ('missing' in PROMTOOL) return;
    const dir = mkdtempSync(join(tmpdir(), 'dashboard-promql-'));
    try {
      // Grafana's variables as Prometheus would see them once Grafana has put them in.
      const asPromQL = (e: string) =>
        e.replaceAll('$__rate_interval', '5m').replaceAll('$__range', '1h').replaceAll('$job', '.+').replaceAll('$instance', '.+');
      const rules = dashboardQueries()
        .map((q, i) => `      - record: dashboard:query_${i}\n        expr: ${JSON.stringify(asPromQL(q.expr))}\n`)
        .join('');
      const file = join(dir, 'dashboard.rules.yml');
      writeFileSync(file, `groups:\n  - name: dashboard\n    rules:\n${rules}`);
      const r = promtool(['check', 'rules', file]);
      expect(r.status, r.output).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('contrib/prometheus against a running daemon', () => {
  let redis: TestRedis;
  let standIn: StandIn;
  let receiver: Receiver;
  let dir: string;
  let daemon: DaemonProcess | undefined;
  let exposition = '';
  /** The first scrape once the daemon says ready. */
  let fresh = '';

  beforeAll(async () => {
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 300, seed: 42 });
    receiver = await startReceiver();
    dir = mkdtempSync(join(tmpdir(), 'contrib-prometheus-'));
    const statusPort = await freePort();
    // MANAGEMENT_URL (daemonEnv sets it), WEBHOOK_URL and a sink: the removal, webhook and sink families are served too.
    const sinksFile = join(dir, 'sinks.json');
    writeFileSync(
      sinksFile,
      JSON.stringify({ sinks: [{ name: 'audit', kind: 'redis_stream', redis: { url: redis.url }, stream: 'changes' }] }),
    );
    daemon = spawnDaemon(
      daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: `contrib${Date.now()}`,
        statusPort,
        extra: { WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET, CHANGES_BASELINE: 'events', SINKS_FILE: sinksFile },
      }),
    );
    await daemon.ready;
    fresh = (await getStatus(statusPort, '/metrics')).body;
    // A sync has run and its events went out: the counters have samples, not only their TYPE lines.
    exposition = await eventually(
      async () => {
        const body = (await getStatus(statusPort, '/metrics')).body;
        return /^user_mirror_sync_runs_total\{status="succeeded"\} [1-9]/m.test(body) &&
          /^user_mirror_webhook_deliveries_total\{outcome="delivered"\} [1-9]/m.test(body) &&
          /^user_mirror_webhook_events_behind 0$/m.test(body) &&
          /^user_mirror_sink_delivered_total\{sink="audit",kind="redis_stream"\} [1-9]/m.test(body)
          ? body
          : undefined;
      },
      60_000,
      () => `a synced, delivered daemon; its output: ${daemon?.text() ?? ''}`,
    );
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The names a scrape can return: every family's name, with a histogram's and a summary's sample suffixes. */
  function served(): Set<string> {
    const names = new Set<string>();
    for (const m of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      const [name, type] = [m[1] ?? '', m[2] ?? ''];
      names.add(name);
      if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s);
      if (type === 'summary') for (const s of ['_sum', '_count']) names.add(name + s);
    }
    return names;
  }

  it('the rules and the dashboard query only metrics the daemon serves (or Prometheus makes)', () => {
    const have = served();
    const queries = [...readAlerts().map((a) => ({ where: `alert ${a.alert}`, expr: a.expr })), ...dashboardQueries()];
    const missing = queries.flatMap((q) =>
      metricsOf(q.expr)
        .filter((m) => !have.has(m) && !PROMETHEUS_OWN.includes(m))
        .map((m) => `${q.where}: ${m}`),
    );
    expect(missing).toEqual([]);
  });

  it("the dashboard shows every one of the daemon's own metric families", () => {
    const shown = new Set(dashboardQueries().flatMap((q) => metricsOf(q.expr)));
    const own = [...exposition.matchAll(/^# TYPE (user_mirror_\S+) (\S+)$/gm)].map((m) => ({ name: m[1] ?? '', type: m[2] ?? '' }));
    const hidden = own.filter(
      (f) => !shown.has(f.name) && !(f.type === 'histogram' && ['_bucket', '_sum', '_count'].some((s) => shown.has(f.name + s))),
    );
    expect(hidden.map((f) => f.name)).toEqual([]);
  });

  /** The process metrics an operator expects of any target, and the ones the dashboard reads. */
  const PROCESS_FAMILIES = [
    'process_cpu_seconds_total',
    'process_start_time_seconds',
    'process_resident_memory_bytes',
    'process_open_fds',
    'process_max_fds',
    'nodejs_heap_size_used_bytes',
    'nodejs_active_handles',
  ];

  it(`${notRun}promtool check metrics accepts the daemon's whole /metrics as served, process metrics included`, () => {
    if ('missing' in PROMTOOL) return;
    expect(exposition).toContain('# TYPE user_mirror_sync_runs_total counter');
    for (const family of PROCESS_FAMILIES) expect(exposition).toMatch(new RegExp(`^# TYPE ${family} `, 'm'));
    const r = promtool(['check', 'metrics'], exposition);
    expect(r.output).toBe('');
    expect(r.status).toBe(0);
  });

  it(`${notRun}promtool check metrics accepts the whole /metrics of \`user-mirror serve\` (the replica's port)`, async () => {
    if ('missing' in PROMTOOL) return;
    const port = await freePort();
    const serve = startCli(['serve'], {
      PATH: process.env.PATH,
      MIRROR_DB: join(dir, 'mirror.db'),
      REPLICA_PORT: String(port),
      REPLICA_API_KEY: 'rk_contrib_prometheus',
    });
    try {
      await serve.line(/"event":"replica.listening"/);
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(res.status).toBe(200);
      const body = await res.text();
      expect(body).toContain('# TYPE user_mirror_replica_connections_shed_total counter');
      for (const family of PROCESS_FAMILIES) expect(body).toMatch(new RegExp(`^# TYPE ${family} `, 'm'));
      const r = promtool(['check', 'metrics'], body);
      expect(r.output).toBe('');
      expect(r.status).toBe(0);
    } finally {
      serve.child.kill('SIGTERM');
      expect(await serve.exited()).toBe(0);
    }
  });

  it("a fresh daemon's first scrape holds every counter series whose labels are known, at 0 where nothing happened yet", () => {
    const value = (series: string): number | undefined => {
      const line = fresh.split('\n').find((l) => l.startsWith(`${series} `));
      return line === undefined ? undefined : Number(line.slice(series.length + 1));
    };
    // Nothing was restarted, removed or refused in the first moments: these are 0, not absent.
    const zero = [
      ...['sync', 'removals'].flatMap((worker) =>
        ['not-running', 'idle-with-waiting-jobs', 'overdue-job'].map(
          (reason) => `user_mirror_worker_restarts_total{worker="${worker}",reason="${reason}"}`,
        ),
      ),
      ...['succeeded', 'already_absent', 'failed', 'retrying', 'rate_limited'].map((o) => `user_mirror_removal_jobs_total{outcome="${o}"}`),
      'user_mirror_webhook_deliveries_total{outcome="failed"}',
    ];
    expect(zero.map((s) => [s, value(s)])).toEqual(zero.map((s) => [s, 0]));
    // These may already count the start-up sync and its events; each must be there.
    const present = [
      ...['succeeded', 'partial', 'failed', 'skipped'].map((status) => `user_mirror_sync_runs_total{status="${status}"}`),
      ...['succeeded', 'partial', 'failed'].map((status) => `user_mirror_sync_duration_seconds_count{status="${status}"}`),
      ...['created', 'updated', 'deleted'].map((change) => `user_mirror_sync_user_changes_total{change="${change}"}`),
      ...['delivered', 'retrying'].map((o) => `user_mirror_webhook_deliveries_total{outcome="${o}"}`),
    ];
    expect(present.filter((s) => value(s) === undefined)).toEqual([]);
  });
});
