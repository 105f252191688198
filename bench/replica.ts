/**
 * `npm run bench:replica`: the replica (`user-mirror serve`) under load over
 * loopback, keep-alive, from an undici pool in this process; the replica,
 * the stand-in and any sync each run in a child process of their own, so
 * client and server do not share one event loop.
 *
 * The mirror (BENCH_REPLICA_USERS, default 200,000 users) is built by
 * `user-mirror sync --once` from a `user-mirror stand-in` that churns one
 * user per page served (so every later sync has something to publish).
 * Scenarios, BENCH_REPLICA_SECONDS each (default 10) after a 1 s warm-up:
 *
 *  - resolve of random active client ids (goal ≥ 20,000 requests/s);
 *  - the same while `sync --once` children run back to back on the same file;
 *  - list pages of 500 at random offsets (goal ≥ 100,000 users/s);
 *  - resolve again with REPLICA_WORKERS processes on the port
 *    (BENCH_REPLICA_WORKERS, default the machine's CPUs; 1 skips it);
 *  - a bare node:http server with a fixed 1 KB body: the floor, measured in
 *    turns with the first resolve scenario (twice each, half the time each);
 *    its row carries the goal on the ratio of their server CPU per request
 *    (≤ 1.5×, bench/goals.ts) with `met`, and the ratio is printed under the
 *    table. Server CPU per request counts the serving process and its workers.
 *
 * Every answer is checked (status; a resolve must name the id asked for), so
 * a fast wrong answer cannot pass. BENCH_REPLICA_PROF=1 runs the replica with
 * `--cpu-prof` and prints where the profile went. Prints a markdown table,
 * with the machine's load average: other work on the machine moves figures.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { encodePathSegment } from '../src/service/path-segment.js';
import { atLeast, atMost, GOALS, metCell } from './goals.js';

const USERS = Number(process.env.BENCH_REPLICA_USERS ?? 200_000);
const SECONDS = Number(process.env.BENCH_REPLICA_SECONDS ?? 10);
const WORKERS = Number(process.env.BENCH_REPLICA_WORKERS ?? cpus().length);
const RESOLVE_CONNECTIONS = Number(process.env.BENCH_REPLICA_CONNECTIONS ?? 32);
const LIST_CONNECTIONS = Number(process.env.BENCH_REPLICA_LIST_CONNECTIONS ?? 8);
const PROFILE = process.env.BENCH_REPLICA_PROF === '1';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'dist', 'cli.js');
const KEY_HEADER = 'x-service-api-key';

interface Row {
  scenario: string;
  /** Server CPU (user + system) per request, from /proc: what one core could serve, free of the client's share. */
  serverMicros: number | undefined;
  connections: number;
  requests: number;
  perSecond: number;
  usersPerSecond: number | undefined;
  p50: number;
  p99: number;
  errors: number;
  goal: string;
  met: string;
}

interface Child {
  child: ChildProcess;
  line(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<number | null>;
}

function startChild(args: readonly string[], env: Record<string, string>, nodeArgs: readonly string[] = []): Child {
  return startProcess([...nodeArgs, CLI, ...args], env, args[0] ?? '');
}

/** A node process running `script` (node -e). */
function startScript(script: string): Child {
  return startProcess(['-e', script], {}, 'script');
}

function startProcess(argv: readonly string[], env: Record<string, string>, name: string): Child {
  const child = spawn(process.execPath, argv, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const line = (pattern: RegExp, timeoutMs = 600_000) =>
    new Promise<string>((resolve, reject) => {
      const started = Date.now();
      const look = () => {
        const hit = out.split('\n').find((l) => pattern.test(l));
        if (hit !== undefined) return resolve(hit);
        if (child.exitCode !== null || Date.now() - started > timeoutMs) return reject(new Error(`${name}: no ${pattern}: ${out} ${err}`));
        setTimeout(look, 50);
      };
      look();
    });
  return { child, line, exited };
}

async function runChild(args: readonly string[], env: Record<string, string>): Promise<number | null> {
  return startChild(args, env).exited;
}

interface Load {
  latencies: Float64Array;
  count: number;
  errors: number;
  seconds: number;
}

/** `connections` loops, each one request at a time, for `seconds`. */
async function load(
  pool: Pool,
  connections: number,
  seconds: number,
  next: () => { path: string; check: (status: number, body: Buffer) => boolean },
  apiKey: string,
): Promise<Load> {
  const latencies: number[] = [];
  let errors = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const headers = { [KEY_HEADER]: apiKey };
  const loop = async () => {
    while (performance.now() < deadline) {
      const { path, check } = next();
      const t0 = performance.now();
      const res = await pool.request({ method: 'GET', path, headers });
      const body = Buffer.from(await res.body.arrayBuffer());
      latencies.push(performance.now() - t0);
      if (!check(res.statusCode, body)) errors++;
    }
  };
  await Promise.all(Array.from({ length: connections }, loop));
  return { latencies: Float64Array.from(latencies).sort(), count: latencies.length, errors, seconds: (performance.now() - started) / 1000 };
}

function percentile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

/** CPU seconds a process and its live children (a `serve` with workers) have used so far (Linux /proc; undefined elsewhere). */
function cpuSeconds(pid: number | undefined): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    let total = (Number(fields[11]) + Number(fields[12])) / 100;
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
    for (const child of children === '' ? [] : children.split(' ')) total += cpuSeconds(Number(child)) ?? 0;
    return total;
  } catch {
    return undefined;
  }
}

/** Runs `l` and charges the server's CPU time over it to its requests. */
async function measured(pid: number | undefined, run: () => Promise<Load>): Promise<Load & { serverMicros: number | undefined }> {
  const before = cpuSeconds(pid);
  const l = await run();
  const after = cpuSeconds(pid);
  return { ...l, serverMicros: before === undefined || after === undefined ? undefined : ((after - before) * 1e6) / l.count };
}

function row(
  scenario: string,
  connections: number,
  l: Load & { serverMicros: number | undefined },
  usersPerRequest: number | undefined,
  goal: string,
  goalPerSecond: number,
): Row {
  const perSecond = l.count / l.seconds;
  const usersPerSecond = usersPerRequest === undefined ? undefined : perSecond * usersPerRequest;
  const measured = usersPerSecond ?? perSecond;
  return {
    scenario,
    serverMicros: l.serverMicros,
    connections,
    requests: l.count,
    perSecond,
    usersPerSecond,
    p50: percentile(l.latencies, 50),
    p99: percentile(l.latencies, 99),
    errors: l.errors,
    goal,
    met: goalPerSecond === 0 ? '' : metCell(atLeast(measured, goalPerSecond)),
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-replica-'));
  const mirrorDb = join(dir, 'mirror.db');
  const serviceKey = `sk_bench_${randomBytes(8).toString('hex')}`;
  const replicaKey = `rk_bench_${randomBytes(8).toString('hex')}`;
  const children: Child[] = [];
  const loadBefore = loadavg();
  try {
    const standIn = startChild(
      ['stand-in', '--users', String(USERS), '--seed', '7', '--port', '0', '--orgs', '0', '--churn-per-page', '1'],
      { SERVICE_API_KEY: serviceKey },
    );
    children.push(standIn);
    const baseUrl = (await standIn.line(/^(?:export )?SERVICE_BASE_URL=/)).replace(/^.*?SERVICE_BASE_URL=/, '');
    const syncEnv = { SERVICE_BASE_URL: baseUrl, SERVICE_API_KEY: serviceKey, MIRROR_DB: mirrorDb, LOG_LEVEL: 'warn' };

    const t0 = performance.now();
    const built = await runChild(['sync', '--once'], syncEnv);
    if (built !== 0) throw new Error(`the building sync exited ${built}`);
    process.stderr.write(
      `bench:replica: mirror of ${USERS.toLocaleString('en-US')} users synced in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );

    const ids = sampleClientIds(mirrorDb, 20_000);
    const profDir = join(ROOT, 'bench-profiles');
    const serve = startChild(
      ['serve'],
      { MIRROR_DB: mirrorDb, REPLICA_PORT: '0', REPLICA_API_KEY: replicaKey, LOG_LEVEL: 'info' },
      PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [],
    );
    children.push(serve);
    const listening = JSON.parse(await serve.line(/"event":"replica.listening"/)) as { port: number };
    const pool = new Pool(`http://127.0.0.1:${listening.port}`, {
      connections: Math.max(RESOLVE_CONNECTIONS, LIST_CONNECTIONS),
      pipelining: 1,
      keepAliveTimeout: 60_000,
    });

    let n = 0;
    const resolveNext = () => {
      const id = ids[(n++ * 7919) % ids.length] ?? '';
      const needle = Buffer.from(JSON.stringify(id));
      return {
        path: `/v2/user/resolve/${encodePathSegment(id)}`,
        check: (status: number, body: Buffer) => (status === 200 && body.includes(needle)) || status === 404,
      };
    };
    const total = activeCount(mirrorDb);
    const listNext = () => {
      const offset = Math.floor(Math.random() * Math.max(1, total - 500));
      return {
        path: `/v2/user?offset=${offset}&limit=500`,
        check: (status: number, body: Buffer) => status === 200 && body.length > 500 * 100,
      };
    };

    const rows: Row[] = [];
    await load(pool, RESOLVE_CONNECTIONS, 1, resolveNext, replicaKey);
    const pid = serve.child.pid;
    // Ours and the bare server take turns, twice, each half the scenario's time: load from
    // others on a shared machine hits both alike, and the CPU ratio compares like with like.
    const bare = await startBare();
    children.push(bare.child);
    const oursRuns: Array<Load & { serverMicros: number | undefined }> = [];
    const bareRuns: Array<Load & { serverMicros: number | undefined }> = [];
    for (let turn = 0; turn < 2; turn++) {
      oursRuns.push(await measured(pid, () => load(pool, RESOLVE_CONNECTIONS, SECONDS / 2, resolveNext, replicaKey)));
      bareRuns.push(await measured(bare.child.child.pid, () => load(bare.pool, RESOLVE_CONNECTIONS, SECONDS / 2, bare.next, replicaKey)));
    }
    await bare.close();
    const ours = combined(oursRuns);
    const reference = combined(bareRuns);
    rows.push(row('resolve, active ids', RESOLVE_CONNECTIONS, ours, undefined, '≥ 20,000 req/s', 20_000));
    const cpuRatio =
      ours.serverMicros !== undefined && reference.serverMicros !== undefined ? ours.serverMicros / reference.serverMicros : undefined;
    const bareRow = row(
      'reference: bare node:http, fixed 1 KB answer (in turns with the row above)',
      RESOLVE_CONNECTIONS,
      reference,
      undefined,
      '',
      0,
    );
    // The goal on the resolve's CPU is against this row: the replica's server CPU per resolve at most GOALS.replicaCpuOverBare × the bare server's.
    bareRow.goal = `resolve's server CPU ≤ ${GOALS.replicaCpuOverBare}× this row's (${cpuRatio === undefined ? 'not measured' : `${cpuRatio.toFixed(2)}×`})`;
    bareRow.met = metCell(atMost(cpuRatio, GOALS.replicaCpuOverBare));
    rows.push(bareRow);

    await load(pool, LIST_CONNECTIONS, 1, listNext, replicaKey);
    rows.push(
      row(
        'list, pages of 500 at random offsets',
        LIST_CONNECTIONS,
        await measured(pid, () => load(pool, LIST_CONNECTIONS, SECONDS, listNext, replicaKey)),
        500,
        '≥ 100,000 users/s',
        100_000,
      ),
    );

    // Syncs back to back on the same file while resolves run.
    let syncing = true;
    let syncs = 0;
    const windowStart = new Date().toISOString();
    const syncLoop = (async () => {
      while (syncing) {
        const sync = startChild(['sync', '--once'], syncEnv);
        children.push(sync);
        await sync.exited;
        syncs++;
      }
    })();
    await new Promise((r) => setTimeout(r, 2_000));
    const during = await measured(pid, () => load(pool, RESOLVE_CONNECTIONS, SECONDS, resolveNext, replicaKey));
    const windowEnd = new Date().toISOString();
    syncing = false;
    await syncLoop;
    const published = publishedBetween(mirrorDb, windowStart, windowEnd);
    rows.push(row(`resolve, sync running (${published} publish(es) in the window)`, RESOLVE_CONNECTIONS, during, undefined, '', 0));

    await pool.close();
    serve.child.kill('SIGTERM');
    await serve.exited;

    // The replica on every core: REPLICA_WORKERS processes on one port (node:cluster).
    if (WORKERS > 1) {
      const many = startChild(['serve'], {
        MIRROR_DB: mirrorDb,
        REPLICA_PORT: '0',
        REPLICA_API_KEY: replicaKey,
        REPLICA_WORKERS: String(WORKERS),
        LOG_LEVEL: 'info',
      });
      children.push(many);
      const port = (JSON.parse(await many.line(/"event":"replica.listening"/)) as { port: number }).port;
      await many.line(/"event":"replica.workers"/);
      const manyPool = new Pool(`http://127.0.0.1:${port}`, { connections: RESOLVE_CONNECTIONS, pipelining: 1, keepAliveTimeout: 60_000 });
      await load(manyPool, RESOLVE_CONNECTIONS, 1, resolveNext, replicaKey);
      const l = await measured(many.child.pid, () => load(manyPool, RESOLVE_CONNECTIONS, SECONDS, resolveNext, replicaKey));
      rows.push(row(`resolve, active ids, REPLICA_WORKERS=${WORKERS}`, RESOLVE_CONNECTIONS, l, undefined, '', 0));
      await manyPool.close();
      many.child.kill('SIGTERM');
      await many.exited;
    }
    print(rows, loadBefore, syncs, cpuRatio);
    if (PROFILE) process.stdout.write(`\nreplica CPU profile in ${profDir} (open in Chrome DevTools or speedscope)\n`);
  } finally {
    for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The floor of this machine: a bare node:http server (child process) that
 * answers every request with one fixed 1 KB record, under the same client.
 * What the replica cannot beat on node:http, whatever it does.
 */
async function startBare(): Promise<{
  child: Child;
  pool: Pool;
  next: () => { path: string; check: (status: number) => boolean };
  close: () => Promise<void>;
}> {
  const script = `const b=Buffer.alloc(1024,120);require('node:http').createServer({keepAliveTimeout:65000},(q,r)=>{r.writeHead(200,['content-type','application/json','content-length','1024']);r.end(b)}).listen(0,'127.0.0.1',function(){console.log('listening '+this.address().port)})`;
  const child = startScript(script);
  const port = Number((await child.line(/^listening \d+/)).split(' ')[1]);
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: RESOLVE_CONNECTIONS, pipelining: 1, keepAliveTimeout: 60_000 });
  let n = 0;
  const next = () => ({ path: `/v2/user/resolve/x${n++}`, check: (status: number) => status === 200 });
  await load(pool, RESOLVE_CONNECTIONS, 1, next, 'unused');
  return {
    child,
    pool,
    next,
    close: async () => {
      await pool.close();
      child.child.kill('SIGKILL');
    },
  };
}

/** Several measured runs as one: requests and CPU summed, latencies merged. */
function combined(runs: ReadonlyArray<Load & { serverMicros: number | undefined }>): Load & { serverMicros: number | undefined } {
  const count = runs.reduce((a, r) => a + r.count, 0);
  const cpu = runs.every((r) => r.serverMicros !== undefined) ? runs.reduce((a, r) => a + (r.serverMicros ?? 0) * r.count, 0) : undefined;
  return {
    latencies: Float64Array.from(runs.flatMap((r) => [...r.latencies])).sort(),
    count,
    errors: runs.reduce((a, r) => a + r.errors, 0),
    seconds: runs.reduce((a, r) => a + r.seconds, 0),
    serverMicros: cpu === undefined ? undefined : cpu / count,
  };
}

function sampleClientIds(path: string, n: number): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare<[number], string>('SELECT client_user_id FROM users WHERE deleted_at IS NULL ORDER BY random() LIMIT ?')
      .pluck()
      .all(n);
  } finally {
    db.close();
  }
}

function activeCount(path: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare<[], number>('SELECT count(*) FROM active_users').pluck().get() ?? 0;
  } finally {
    db.close();
  }
}

function publishedBetween(path: string, from: string, to: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return (
      db.prepare<[string, string], number>('SELECT count(*) FROM sync_runs WHERE published_at BETWEEN ? AND ?').pluck().get(from, to) ?? 0
    );
  } finally {
    db.close();
  }
}

function print(rows: readonly Row[], loadBefore: number[], syncs: number, cpuRatio: number | undefined): void {
  const fmt = (x: number, digits = 0) => x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const lines = [
    `replica over a mirror of ${fmt(USERS)} users, ${SECONDS} s per scenario, loopback, keep-alive (node ${process.version}, ${cpus().length} CPUs)`,
    '',
    '| scenario | connections | requests | req/s | users/s | p50 ms | p99 ms | server CPU µs/req | errors | goal | met |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.scenario} | ${r.connections} | ${fmt(r.requests)} | ${fmt(r.perSecond)} | ${r.usersPerSecond === undefined ? '' : fmt(r.usersPerSecond)} | ${fmt(r.p50, 2)} | ${fmt(r.p99, 2)} | ${r.serverMicros === undefined ? '' : fmt(r.serverMicros, 1)} | ${r.errors} | ${r.goal} | ${r.met} |`,
    ),
    '',
    `Server CPU per resolve: ${cpuRatio === undefined ? 'not measured (no /proc)' : `${cpuRatio.toFixed(2)}× the bare server's (goal ≤ ${GOALS.replicaCpuOverBare}×: ${atMost(cpuRatio, GOALS.replicaCpuOverBare) === true ? 'met' : 'NOT met'})`}.`,
    `load average (1/5/15 min): ${loadBefore.map((l) => l.toFixed(2)).join(' / ')} before, ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' / ')} after; ${syncs} background sync run(s).`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

await main();
