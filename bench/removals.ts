/**
 * `npm run bench:removals`: org-member removals end to end.
 *
 *   producer (this process, addBulk)  ->  Redis (its own redis-server)
 *     ->  `node dist/cli.js worker removals` (child, audit into a temp SQLite)
 *     ->  the stand-in service (child)
 *
 * Scenarios: a burst of N removals without faults, the same with 20% of
 * DELETEs failing (429 / 500 / 503 / connection reset / truncated answer),
 * and a paced run below saturation, whose latencies are not dominated by
 * queueing behind a burst; then the burst again on a local Redis Cluster of
 * three masters (same AOF settings), beside the single node in the same run. Latency is `job.finishedOn - job.timestamp`
 * (enqueue to done); throughput is N over the span from the first enqueue
 * to the last completion.
 *
 * Goals: >= 1,000 removals/s without faults; with faults every removal
 * completes and every member is deleted exactly once.
 *
 * Options (env): BENCH_REMOVALS (10000), BENCH_CONCURRENCY (100),
 * BENCH_PACED_RATE (1000 per second), BENCH_WORKER_NODE_ARGS (node flags
 * for the worker, e.g. --cpu-prof).
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Job } from 'bullmq';
import { startTestRedis } from '../test/support/redis-server.js';
import { startTestCluster, type TestCluster } from '../test/support/redis-cluster.js';
import { createRedisConnection, readQueueSettings } from '../jobs/redis-connection.js';
import { enqueueMemberRemovals } from '../jobs/removals/producer.js';
import { createRemovalQueue, type RemovalQueue } from '../jobs/removals/queue-handle.js';
import type { RemovalRequest } from '../jobs/removals/contract.js';
import type { FaultPlan } from '../src/stand-in/index.js';
import type { CheckReport, StandInReply, StandInRequest } from './removals-stand-in.js';

const N = Number(process.env.BENCH_REMOVALS ?? 10_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 100);
const PACED_RATE = Number(process.env.BENCH_PACED_RATE ?? 1_000);
const BATCH = 500;
const DIST = fileURLToPath(new URL('../', import.meta.url));

const FAULTS: Partial<FaultPlan> = {
  pathPrefix: '/v1/',
  rate429: 0.05,
  rate500: 0.04,
  rate503: 0.05,
  resetRate: 0.03,
  truncateRate: 0.03,
  // No Retry-After: the worker's own backoff (REMOVAL_BACKOFF_MS) paces retries and 429 pauses.
  retryAfter: null,
};

interface Scenario {
  name: string;
  faults: Partial<FaultPlan>;
  /** Enqueue rate; undefined = everything at once. */
  ratePerSecond?: number;
  count: number;
  /** Where the queue lives: the single node (default) or the three-master cluster. */
  cluster?: boolean;
}

interface Row {
  scenario: string;
  removals: number;
  completed: number;
  failed: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p99: number;
  max: number;
  deleteCalls: number;
  exactlyOnce: boolean;
  statuses: string;
}

async function main(): Promise<void> {
  // Configured as production must be (AOF, noeviction): the worker refuses anything less.
  const redis = await startTestRedis({ persistence: 'aof-everysec' });
  const cluster: TestCluster = await startTestCluster({ appendfsync: 'everysec' });
  const standIn = await startStandInChild();
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-'));
  const rows: Row[] = [];
  try {
    const scenarios: Scenario[] = [
      { name: 'burst, no faults', faults: {}, count: N },
      { name: 'burst, 20% faults', faults: FAULTS, count: N },
      { name: `paced ${PACED_RATE}/s, no faults`, faults: {}, ratePerSecond: PACED_RATE, count: Math.min(N, PACED_RATE * 10) },
      { name: 'burst, no faults, Redis Cluster (3 masters)', faults: {}, count: N, cluster: true },
    ];
    for (const scenario of scenarios) {
      // On a cluster every key of a queue must share a slot: the hash tag.
      const prefix = scenario.cluster ? `{bench${randomUUID().slice(0, 6)}}` : `bench${randomUUID().slice(0, 6)}`;
      const redisEnv: Record<string, string> = scenario.cluster ? { REDIS_CLUSTER_NODES: cluster.nodesEnv } : { REDIS_URL: redis.url };
      const worker = startWorker(redisEnv, prefix, standIn, join(dir, `${prefix}.db`));
      const producer = createRedisConnection(readQueueSettings({ ...redisEnv, QUEUE_PREFIX: prefix }).endpoint, { role: 'producer' });
      const queue = createRemovalQueue(producer, { target: standIn.managementUrl, prefix });
      try {
        await waitForLine(worker, /removal worker started/);
        rows.push(await run(scenario, queue, standIn));
        process.stderr.write(`${scenario.name}: done\n`);
      } finally {
        worker.kill('SIGTERM');
        await new Promise((resolve) => worker.once('exit', resolve));
        await queue.close();
        producer.disconnect();
      }
    }
  } finally {
    await standIn.request({ op: 'close' }).catch(() => undefined);
    await redis.stop();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(render(rows));
}

async function run(scenario: Scenario, queue: RemovalQueue, standIn: StandInChild): Promise<Row> {
  const members: RemovalRequest[] = Array.from({ length: scenario.count }, () => ({ org_id: randomUUID(), member_id: randomUUID() }));
  const pairs = members.map((m): [string, string] => [m.org_id, m.member_id]);
  for (let i = 0; i < pairs.length; i += 5_000) await standIn.request({ op: 'add', members: pairs.slice(i, i + 5_000) });
  await standIn.request({ op: 'faults', plan: scenario.faults });
  const callsBefore = (await standIn.check([])).deleteCalls;

  const started = Date.now();
  const batch = scenario.ratePerSecond === undefined ? BATCH : Math.max(1, Math.round(scenario.ratePerSecond / 20));
  for (let i = 0; i < members.length; i += batch) {
    await enqueueMemberRemovals(queue, members.slice(i, i + batch), { policy: { attempts: 10, backoffMs: 50 } });
    if (scenario.ratePerSecond !== undefined) {
      const due = started + ((i + batch) / scenario.ratePerSecond) * 1000;
      await sleep(Math.max(0, due - Date.now()));
    }
  }

  // Done when every job is completed or failed; bounded so a stuck run reports instead of hanging.
  const deadline = Date.now() + 15 * 60_000;
  let counts = await queue.getJobCounts('completed', 'failed');
  while ((counts.completed ?? 0) + (counts.failed ?? 0) < members.length && Date.now() < deadline) {
    await sleep(100);
    counts = await queue.getJobCounts('completed', 'failed');
  }

  const jobs: Job[] = [];
  for (let start = 0; start < members.length; start += 1_000) jobs.push(...(await queue.getCompleted(start, start + 999)));
  const latencies = jobs.map((j) => (j.finishedOn ?? 0) - j.timestamp).sort((a, b) => a - b);
  const first = Math.min(...jobs.map((j) => j.timestamp));
  const last = Math.max(...jobs.map((j) => j.finishedOn ?? 0));
  const seconds = (last - first) / 1000;
  const report = await standIn.check(pairs);
  return {
    scenario: scenario.name,
    removals: members.length,
    completed: counts.completed ?? 0,
    failed: counts.failed ?? 0,
    seconds,
    perSecond: jobs.length / seconds,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    max: latencies[latencies.length - 1] ?? 0,
    deleteCalls: report.deleteCalls - callsBefore,
    exactlyOnce: report.notExactlyOnce === 0 && report.stillPresent === 0,
    statuses: Object.entries(report.statuses)
      .map(([s, n]) => `${s}:${n}`)
      .join(' '),
  };
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] ?? 0;
}

function render(rows: readonly Row[]): string {
  const head =
    '| scenario | removals | completed | failed | wall s | removals/s | p50 ms | p99 ms | max ms | DELETE calls | each member deleted exactly once |\n' +
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n';
  const body = rows
    .map(
      (r) =>
        `| ${r.scenario} | ${r.removals} | ${r.completed} | ${r.failed} | ${r.seconds.toFixed(1)} | ${Math.round(r.perSecond)} | ${r.p50} | ${r.p99} | ${r.max} | ${r.deleteCalls} | ${r.exactlyOnce ? 'yes' : 'NO'} |`,
    )
    .join('\n');
  const statuses = rows.map((r) => `- ${r.scenario}: stand-in DELETE answers by status: ${r.statuses}`).join('\n');
  return `\n${head}${body}\n\n${statuses}\n\nworker: REMOVAL_CONCURRENCY=${CONCURRENCY}, REMOVAL_BACKOFF_MS=50; faults: 5% 429, 4% 500, 5% 503 (no Retry-After), 3% reset before the work, 3% answer truncated after the work\n`;
}

function startWorker(redisEnv: Record<string, string>, prefix: string, standIn: StandInChild, dbPath: string): ChildProcess {
  // e.g. BENCH_WORKER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" to see where the worker spends its time.
  const nodeArgs = (process.env.BENCH_WORKER_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  return spawn(process.execPath, [...nodeArgs, join(DIST, 'cli.js'), 'worker', 'removals'], {
    env: {
      PATH: process.env.PATH,
      ...redisEnv,
      QUEUE_PREFIX: prefix,
      MANAGEMENT_URL: standIn.managementUrl,
      MANAGEMENT_KEY: standIn.managementKey,
      MIRROR_DB: dbPath,
      REMOVAL_CONCURRENCY: String(CONCURRENCY),
      HTTP_CONNECTIONS: String(CONCURRENCY),
      REMOVAL_BACKOFF_MS: '50',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

function waitForLine(child: ChildProcess, pattern: RegExp): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    const onData = (d: Buffer) => {
      out += d.toString();
      if (pattern.test(out)) {
        child.stdout?.off('data', onData);
        child.stdout?.resume();
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`worker exited (${code}) before starting: ${out}`)));
  });
}

interface StandInChild {
  managementUrl: string;
  managementKey: string;
  request(msg: DistributiveOmit<StandInRequest, 'id'>): Promise<CheckReport | undefined>;
  check(members: Array<[string, string]>): Promise<CheckReport>;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

async function startStandInChild(): Promise<StandInChild> {
  const child = fork(join(DIST, 'bench', 'removals-stand-in.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const pending = new Map<number, { resolve: (r: CheckReport | undefined) => void; reject: (e: Error) => void }>();
  let next = 1;
  const ready = new Promise<{ managementUrl: string; managementKey: string }>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`stand-in exited with ${code}`)));
    child.on('message', (raw: unknown) => {
      const msg = raw as StandInReply;
      if ('ready' in msg) return resolve(msg);
      const waiter = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.ok) waiter?.resolve(msg.report);
      else waiter?.reject(new Error(msg.error));
    });
  });
  const { managementUrl, managementKey } = await ready;
  const request = (msg: DistributiveOmit<StandInRequest, 'id'>) =>
    new Promise<CheckReport | undefined>((resolve, reject) => {
      const id = next++;
      pending.set(id, { resolve, reject });
      child.send({ ...msg, id });
    });
  return {
    managementUrl,
    managementKey,
    request,
    async check(members) {
      const report = await request({ op: 'check', members });
      if (report === undefined) throw new Error('stand-in sent no report');
      return report;
    },
  };
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:removals failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
