/**
 * `npm run bench:replica-hostile`: the replica (`user-mirror serve`) against
 * hostile clients on 127.0.0.1, under a 1,024-descriptor limit (`prlimit
 * --nofile=1024:1024`, the common default), and how the normal clients beside
 * them fare. Two scenarios, one after the other, on one `serve`:
 *
 *  - slow headers: BENCH_HOSTILE_SLOW (default 1,000) connections each send
 *    a request line, then one header line every 5 s, never finishing; while
 *    they hold, a normal client opens a fresh connection every 250 ms for
 *    BENCH_HOSTILE_SECONDS (default 80) and asks a resolve (10 s timeout
 *    each): how many are answered, how fast, and when the server cut the
 *    slow ones;
 *  - flood: BENCH_HOSTILE_FLOOD (default 10,000) connections at once, each
 *    one resolve; a connection refused or reset before its answer is tried
 *    again after 100 ms, as a client's retry would, until 60 s from the
 *    start: how many are answered within the 60 s, and how fast.
 *
 * The replica's own /metrics (user_mirror_replica_*) is printed after each.
 * Every loop is bounded in count and time. This process needs descriptors
 * for the flood (ulimit -n above BENCH_HOSTILE_FLOOD + 100). Extra `serve`
 * settings come from the environment (REPLICA_MAX_CONNECTIONS, ...).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SLOW = Number(process.env.BENCH_HOSTILE_SLOW ?? 1_000);
const FLOOD = Number(process.env.BENCH_HOSTILE_FLOOD ?? 10_000);
const SECONDS = Number(process.env.BENCH_HOSTILE_SECONDS ?? 80);
const FLOOD_SECONDS = 60;
const NOFILE = Number(process.env.BENCH_HOSTILE_NOFILE ?? 1_024);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'dist', 'cli.js');
const KEY_HEADER = 'x-service-api-key';
const PASS_THROUGH = ['REPLICA_MAX_CONNECTIONS', 'REPLICA_HEADERS_TIMEOUT_MS', 'REPLICA_IDLE_TIMEOUT_MS'];

interface Child {
  child: ChildProcess;
  line(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<number | null>;
  output(): string;
}

function startProcess(command: string, argv: readonly string[], env: Record<string, string>): Child {
  const child = spawn(command, argv, { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const line = (pattern: RegExp, timeoutMs = 600_000) =>
    new Promise<string>((resolve, reject) => {
      const started = Date.now();
      const look = () => {
        const hit = out.split('\n').find((l) => pattern.test(l));
        if (hit !== undefined) return resolve(hit);
        if (child.exitCode !== null || Date.now() - started > timeoutMs) return reject(new Error(`no ${pattern}: ${out}`));
        setTimeout(look, 50);
      };
      look();
    });
  return { child, line, exited, output: () => out };
}

/** One GET on a fresh connection: its latency in ms, or undefined (no answer: refused, reset, timed out). */
function getOnce(port: number, path: string, key: string, timeoutMs: number): Promise<number | undefined> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false, headers: { [KEY_HEADER]: key, connection: 'close' } }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode === 200 || res.statusCode === 404 ? performance.now() - started : undefined));
      res.once('error', () => resolve(undefined));
    });
    req.setTimeout(timeoutMs, () => req.destroy());
    req.once('error', () => resolve(undefined));
    req.end();
  });
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface SlowResult {
  opened: number;
  asked: number;
  answered: number;
  p50: number;
  max: number;
  firstAnswerS: number;
  cutBeforeEnd: number;
  medianCutS: number;
}

async function slowHeaders(port: number, key: string, path: string): Promise<SlowResult> {
  const sockets: Socket[] = [];
  const cuts: number[] = [];
  const t0 = performance.now();
  let ending = false;
  for (let i = 0; i < SLOW; i++) {
    const s = connect({ host: '127.0.0.1', port });
    s.on('error', () => undefined);
    // Read what the server sends (its 408), so its close is seen.
    s.resume();
    s.once('connect', () => s.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n`));
    let cut = false;
    const onCut = () => {
      if (!ending && !cut) cuts.push((performance.now() - t0) / 1000);
      cut = true;
    };
    s.once('end', onCut);
    s.once('close', onCut);
    sockets.push(s);
    if (i % 100 === 99) await sleep(10);
  }
  const drip = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write(`x-drip-${Math.floor(Math.random() * 1e6)}: 1\r\n`);
  }, 5_000);
  const asks: Array<Promise<{ at: number; ms: number | undefined }>> = [];
  const until = performance.now() + SECONDS * 1000;
  while (performance.now() < until) {
    const at = (performance.now() - t0) / 1000;
    asks.push(getOnce(port, path, key, 10_000).then((ms) => ({ at, ms })));
    await sleep(250);
  }
  const results = await Promise.all(asks);
  ending = true;
  clearInterval(drip);
  const opened = sockets.length;
  for (const s of sockets) s.destroy();
  const answered = results.filter((r) => r.ms !== undefined);
  const ms = answered.map((r) => r.ms ?? 0);
  return {
    opened,
    asked: results.length,
    answered: answered.length,
    p50: percentile(ms, 50),
    max: Math.max(0, ...ms),
    firstAnswerS: answered[0]?.at ?? NaN,
    cutBeforeEnd: cuts.length,
    medianCutS: percentile(cuts, 50),
  };
}

interface FloodResult {
  answered: number;
  tries: number;
  p50: number;
  p99: number;
  max: number;
}

async function flood(port: number, key: string, path: string): Promise<FloodResult> {
  const t0 = performance.now();
  const deadline = t0 + FLOOD_SECONDS * 1000;
  let tries = 0;
  const one = async (): Promise<number | undefined> => {
    while (performance.now() < deadline) {
      tries++;
      const ms = await getOnce(port, path, key, Math.max(1, deadline - performance.now()));
      if (ms !== undefined) return performance.now() - t0;
      await sleep(100);
    }
    return undefined;
  };
  const all: Array<Promise<number | undefined>> = [];
  for (let i = 0; i < FLOOD; i++) {
    all.push(one());
    if (i % 500 === 499) await sleep(1);
  }
  const done = (await Promise.all(all)).filter((v): v is number => v !== undefined);
  return { answered: done.length, tries, p50: percentile(done, 50), p99: percentile(done, 99), max: Math.max(0, ...done) };
}

async function metrics(port: number): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () =>
        resolve(
          res.statusCode === 200
            ? body
                .split('\n')
                .filter((l) => /^(user_mirror_replica|process_open_fds)/.test(l))
                .join('\n')
            : `(/metrics: ${res.statusCode})`,
        ),
      );
    });
    req.setTimeout(10_000, () => req.destroy());
    req.once('error', (err) => resolve(`(/metrics: ${err.message})`));
    req.end();
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-hostile-'));
  const mirrorDb = join(dir, 'mirror.db');
  const serviceKey = `sk_bench_${randomBytes(8).toString('hex')}`;
  const replicaKey = `rk_bench_${randomBytes(8).toString('hex')}`;
  const children: Child[] = [];
  const load = loadavg();
  try {
    const standIn = startProcess(process.execPath, [CLI, 'stand-in', '--users', '2000', '--seed', '7', '--port', '0', '--orgs', '0'], {
      SERVICE_API_KEY: serviceKey,
    });
    children.push(standIn);
    const baseUrl = (await standIn.line(/^(?:export )?SERVICE_BASE_URL=/)).replace(/^.*?SERVICE_BASE_URL=/, '');
    const sync = startProcess(process.execPath, [CLI, 'sync', '--once'], {
      SERVICE_BASE_URL: baseUrl,
      SERVICE_API_KEY: serviceKey,
      MIRROR_DB: mirrorDb,
      LOG_LEVEL: 'warn',
    });
    if ((await sync.exited) !== 0) throw new Error(`sync failed: ${sync.output()}`);
    const extra = Object.fromEntries(PASS_THROUGH.filter((n) => process.env[n] !== undefined).map((n) => [n, process.env[n] ?? '']));
    const serve = startProcess('prlimit', [`--nofile=${NOFILE}:${NOFILE}`, '--', process.execPath, CLI, 'serve'], {
      MIRROR_DB: mirrorDb,
      REPLICA_PORT: '0',
      REPLICA_API_KEY: replicaKey,
      LOG_LEVEL: 'info',
      ...extra,
    });
    children.push(serve);
    const { port } = JSON.parse(await serve.line(/"event":"replica.listening"/)) as { port: number };
    const path = '/v2/user/resolve/no-such-user';
    process.stderr.write(`bench:replica-hostile: serve on ${port} under nofile ${NOFILE}; slow headers for ${SECONDS} s\n`);
    const slow = await slowHeaders(port, replicaKey, path);
    const afterSlow = await metrics(port);
    await sleep(2_000);
    process.stderr.write(`bench:replica-hostile: flood of ${FLOOD}\n`);
    const fl = await flood(port, replicaKey, path);
    const afterFlood = await metrics(port);
    const logs = serve
      .output()
      .split('\n')
      .filter((l) => /replica\.(connections|client)/.test(l));
    const f = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : '—');
    process.stdout.write(
      [
        `load average before: ${load.map((x) => x.toFixed(2)).join(' ')}; serve under prlimit --nofile=${NOFILE}; settings: ${JSON.stringify(extra)}`,
        '',
        '| scenario | normal clients answered | p50 ms | max ms | notes |',
        '|---|---|---|---|---|',
        `| ${slow.opened} slow-header connections, ${SECONDS} s | ${slow.answered} of ${slow.asked} | ${f(slow.p50)} | ${f(slow.max)} | first answered at ${slow.firstAnswerS.toFixed(1)} s; ${slow.cutBeforeEnd} slow connections cut by the server (median at ${Number.isFinite(slow.medianCutS) ? slow.medianCutS.toFixed(1) : '—'} s) |`,
        `| flood of ${FLOOD} connections, ${FLOOD_SECONDS} s | ${fl.answered} of ${FLOOD} | ${f(fl.p50)} | ${f(fl.max)} | p99 ${f(fl.p99)} ms from the flood's start; ${fl.tries} tries (a refused one retried after 100 ms) |`,
        '',
        'metrics after the slow headers:',
        afterSlow,
        'metrics after the flood:',
        afterFlood,
        `log lines about connections: ${logs.length}`,
        ...logs.slice(0, 6),
        '',
      ].join('\n'),
    );
  } finally {
    for (const c of children) c.child.kill('SIGTERM');
    await Promise.all(children.map((c) => c.exited));
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
