/**
 * `npm run bench:sync`: the sync path against the stand-in over loopback,
 * the stand-in in a child process (its own core), the sync in this one.
 *
 *   1. first sync of BENCH_USERS (default 1,000,000) into a fresh mirror,
 *      with the peak RSS of this process
 *   2. re-sync of the same, unchanged
 *   3. a naive baseline on BENCH_BASELINE_USERS (default 100,000): one page
 *      at a time, one autocommitted INSERT OR REPLACE per user
 *   4. 100 ms per request, concurrency 8, first sync of BENCH_LATENCY_USERS
 *      (default 200,000) into a fresh mirror: latency hiding, not CPU
 *
 * Prints a markdown table. Each scenario checks that the run succeeded and
 * saw every user, so a fast wrong answer cannot pass.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openMirror } from '../db/open.js';
import { ServiceClient } from '../src/service/client.js';
import { runSync, type SyncSummary } from '../src/sync/engine.js';
import { PAGE_LIMIT } from '../src/sync/page-plan.js';
import { callWithRetries } from '../src/sync/retrying-call.js';
import type { FaultPlan } from '../src/stand-in/index.js';
import type { SyncStandInReady, SyncStandInRequest } from './sync-stand-in.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const USERS = Number(process.env.BENCH_USERS ?? 1_000_000);
const LATENCY_USERS = Number(process.env.BENCH_LATENCY_USERS ?? 200_000);
const BASELINE_USERS = Number(process.env.BENCH_BASELINE_USERS ?? 100_000);
const MB = 1024 * 1024;

interface Row {
  scenario: string;
  users: number;
  seconds: number;
  rate: number;
  peakRssMb: number;
  goal: string;
  pass: boolean | undefined;
}

interface StandInChild {
  ready: SyncStandInReady;
  send(msg: SyncStandInRequest): Promise<void>;
  close(): Promise<void>;
}

async function startStandInChild(users: number): Promise<StandInChild> {
  const child: ChildProcess = fork(join(HERE, 'sync-stand-in.js'), [String(users)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = await new Promise<SyncStandInReady>((resolve, reject) => {
    child.once('message', (m) => resolve(m as SyncStandInReady));
    child.once('exit', (code) => reject(new Error(`stand-in exited with ${code}`)));
  });
  return {
    ready,
    send: (msg) =>
      new Promise((resolve) => {
        child.once('message', () => resolve());
        child.send(msg);
      }),
    close: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.send({ op: 'close' } satisfies SyncStandInRequest);
      }),
  };
}

function clientOf(s: SyncStandInReady, connections: number): ServiceClient {
  return new ServiceClient({ baseUrl: s.baseUrl, apiKey: s.apiKey, apiKeyHeader: s.apiKeyHeader, connections });
}

/** Samples RSS while `work` runs; the kernel's high-water mark backs it up for the first scenario. */
async function measured<T>(work: () => Promise<T>): Promise<{ result: T; seconds: number; peakRssMb: number }> {
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 20);
  const started = performance.now();
  try {
    const result = await work();
    const seconds = (performance.now() - started) / 1000;
    peak = Math.max(peak, process.memoryUsage().rss);
    return { result, seconds, peakRssMb: peak / MB };
  } finally {
    clearInterval(sampler);
  }
}

function expectComplete(summary: SyncSummary, users: number, what: string): void {
  if (summary.status !== 'succeeded' || summary.usersSeen !== users) {
    throw new Error(`${what}: expected a succeeded run over ${users} users, got ${JSON.stringify(summary)}`);
  }
}

async function syncScenario(
  scenario: string,
  client: ServiceClient,
  dbPath: string,
  users: number,
  concurrency: number,
  goal: string,
  minRate: number,
): Promise<Row> {
  const db = openMirror(dbPath);
  try {
    const { result, seconds, peakRssMb } = await measured(() => runSync({ client, db, concurrency }));
    expectComplete(result, users, scenario);
    const rate = users / seconds;
    return report({ scenario, users, seconds, rate, peakRssMb, goal, pass: rate >= minRate });
  } finally {
    db.close();
  }
}

/** What a first attempt would do: a page at a time, a write (and so a commit) per user. */
async function naiveBaseline(client: ServiceClient, dbPath: string, users: number): Promise<Row> {
  const db = openMirror(dbPath);
  const upsert = db.prepare(
    `INSERT OR REPLACE INTO users (user_id, team_id, client_user_id, raw, content_hash, first_seen_at, last_seen_at)
     VALUES (?, ?, ?, ?, '', ?, ?)`,
  );
  try {
    const { seconds, peakRssMb } = await measured(async () => {
      for (let offset = 0; offset < users; offset += PAGE_LIMIT) {
        const params = { offset, limit: Math.min(PAGE_LIMIT, users - offset) };
        // Retried like the sync's own requests, so a dropped keep-alive socket does not end the benchmark.
        const page = await callWithRetries(`offset ${offset}`, () => client.listUsersPage(params), { attempts: 5 });
        const now = new Date().toISOString();
        for (const record of page.records) {
          if (!record.ok) continue;
          const u = record.user;
          upsert.run(u.user_id, u.team_id, u.client_user_id, JSON.stringify(page.raw[record.index]), now, now);
        }
      }
    });
    return report({ scenario: 'naive baseline (page at a time, autocommit per user)', users, seconds, rate: users / seconds, peakRssMb, goal: 'reference', pass: undefined });
  } finally {
    db.close();
  }
}

function report(row: Row): Row {
  process.stderr.write(`bench:sync:   ${row.scenario}: ${row.users} users in ${row.seconds.toFixed(1)} s, ${Math.round(row.rate)} users/s, peak RSS ${Math.round(row.peakRssMb)} MB\n`);
  return row;
}

function table(rows: readonly Row[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const head = '| scenario | users | seconds | users/s | peak RSS MB | goal | result |\n|---|---:|---:|---:|---:|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.scenario} | ${fmt(r.users)} | ${r.seconds.toFixed(1)} | ${fmt(r.rate)} | ${fmt(r.peakRssMb)} | ${r.goal} | ${r.pass === undefined ? '-' : r.pass ? 'pass' : 'FAIL'} |`,
  );
  return [head, ...body].join('\n');
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-sync-'));
  const rows: Row[] = [];
  process.stderr.write(`bench:sync: starting the stand-in with ${USERS.toLocaleString('en-US')} users (child process)\n`);
  const big = await startStandInChild(USERS);
  const bigClient = clientOf(big.ready, 8);
  try {
    process.stderr.write('bench:sync: 1/4 first sync\n');
    const first = await syncScenario(`first sync (concurrency 4)`, bigClient, join(dir, 'mirror.db'), USERS, 4, '>= 60,000 users/s, RSS <= 300 MB', 60_000);
    // ru_maxrss: the process's true peak, which the sampler may have missed between ticks.
    first.peakRssMb = Math.max(first.peakRssMb, (process.resourceUsage().maxRSS * 1024) / MB);
    first.pass = first.pass === true && first.peakRssMb <= 300;
    rows.push(first);

    process.stderr.write('bench:sync: 2/4 re-sync, unchanged\n');
    rows.push(await syncScenario('re-sync unchanged (concurrency 4)', bigClient, join(dir, 'mirror.db'), USERS, 4, '>= 150,000 users/s', 150_000));

    process.stderr.write('bench:sync: 3/4 naive baseline\n');
    const baselineClient = clientOf(big.ready, 1);
    const baseline = await naiveBaseline(baselineClient, join(dir, 'baseline.db'), Math.min(BASELINE_USERS, USERS)).finally(() => baselineClient.close());
    first.goal += `, >= 5x baseline (${(first.rate / baseline.rate).toFixed(1)}x)`;
    first.pass = first.pass && first.rate >= 5 * baseline.rate;

    await bigClient.close();
    await big.close();

    process.stderr.write(`bench:sync: 4/4 100 ms latency, ${LATENCY_USERS.toLocaleString('en-US')} users\n`);
    const slow = await startStandInChild(LATENCY_USERS);
    const slowClient = clientOf(slow.ready, 8);
    try {
      await slow.send({ op: 'faults', plan: { latencyMs: 100 } satisfies Partial<FaultPlan> });
      rows.push(await syncScenario('first sync, 100 ms latency (concurrency 8)', slowClient, join(dir, 'latency.db'), LATENCY_USERS, 8, '>= 32,000 users/s', 32_000));
    } finally {
      await slowClient.close();
      await slow.close();
    }
    rows.push(baseline);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`\n${table(rows)}\n\nnode ${process.version}, ${(await import('node:os')).cpus().length} CPUs; stand-in in a child process; users/s end to end (HTTP, validation, staging, publish).\n`);
}

await main();
