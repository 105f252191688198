/**
 * contrib/prometheus against real parts: promtool (Debian's `prometheus`
 * package, unpacked by .ci/run without installing a server) checks the alert
 * rules and runs their unit tests, a running daemon (a child process with
 * its own redis-server, the stand-in and a webhook receiver, removals and
 * webhooks configured so that every metric family is served) is scraped,
 * and every metric a rule or a dashboard panel queries must be one it
 * serves; `promtool check metrics` must accept what it serves.
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
import { eventually } from './support/eventually.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';

const CONTRIB = join(ROOT, 'contrib', 'prometheus');
const RULES = join(CONTRIB, 'user-mirror.rules.yml');
const RULE_TESTS = join(CONTRIB, 'user-mirror.rules.test.yml');
const DASHBOARD = join(CONTRIB, 'user-mirror.dashboard.json');
const OPERATIONS = join(ROOT, 'docs', 'operations.md');

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

  it('every alert has an expression, a summary, a description and a runbook in docs/operations.md', () => {
    expect(alerts.length).toBe((readFileSync(RULES, 'utf8').match(/- alert: /g) ?? []).length);
    const anchors = new Set(
      [...readFileSync(OPERATIONS, 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map((m) => `docs/operations.md#${slug(m[1] ?? '')}`),
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

  beforeAll(async () => {
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 300, seed: 42 });
    receiver = await startReceiver();
    dir = mkdtempSync(join(tmpdir(), 'contrib-prometheus-'));
    const statusPort = await freePort();
    // MANAGEMENT_URL (daemonEnv sets it) and WEBHOOK_URL: the removal and webhook families are served too.
    daemon = spawnDaemon(
      daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb: join(dir, 'mirror.db'),
        queuePrefix: `contrib${Date.now()}`,
        statusPort,
        extra: { WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET, CHANGES_BASELINE: 'events' },
      }),
    );
    await daemon.ready;
    // A sync has run and its events went out: the counters have samples, not only their TYPE lines.
    exposition = await eventually(
      async () => {
        const body = (await getStatus(statusPort, '/metrics')).body;
        return /^user_mirror_sync_runs_total\{status="succeeded"\} [1-9]/m.test(body) &&
          /^user_mirror_webhook_deliveries_total\{outcome="delivered"\} [1-9]/m.test(body) &&
          /^user_mirror_webhook_events_behind 0$/m.test(body)
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

  // The project's own families. prom-client's default process metrics are not linted: its
  // nodejs_active_handles_total and friends are gauges named like counters, which promtool notes.
  it(`${notRun}promtool check metrics accepts the daemon's own metrics (user_mirror_*) as served`, () => {
    if ('missing' in PROMTOOL) return;
    const own = exposition
      .split('\n')
      .filter((line) => /^(# (HELP|TYPE) )?user_mirror_/.test(line))
      .join('\n');
    expect(own).toContain('# TYPE user_mirror_sync_runs_total counter');
    const r = promtool(['check', 'metrics'], `${own}\n`);
    expect(r.output).toBe('');
    expect(r.status).toBe(0);
  });
});
