/**
 * `npm run bench:sync`: the sync path against the stand-in over loopback,
 * measured against honest peers in the same run, on the same stand-in. The
 * stand-in runs in a child process (its own core); every scenario, ours and
 * the peers', runs in a fresh process of its own (bench/sync-run.ts), as the
 * daemon runs each sync, with its peak RSS measured the same way:
 *
 *   - ours: first sync of BENCH_USERS (default 100,000) into a fresh mirror
 *     (concurrency 4), then a re-sync of the same, unchanged
 *   - the competent script (bench/peer-script.ts) on BENCH_SCRIPT_USERS
 *     (default BENCH_USERS): 4 pages in flight, one transaction, upserts that
 *     skip unchanged rows, WAL. First sync and re-sync unchanged.
 *   - the official SDK's plain loop (bench/peer-sdk.ts) on BENCH_PEER_USERS
 *     (default min(BENCH_USERS, 100,000)): a page at a time, a transaction
 *     per page. First sync and re-sync.
 *   - the fetch-only floor with no added latency (concurrency 4), after the
 *     re-syncs: the stand-in and HTTP alone, what a re-sync is up against
 *   - 100 ms per request, concurrency 8, on a stand-in of
 *     BENCH_LATENCY_USERS (default min(BENCH_USERS, 200,000)): our first sync
 *     between two runs of the fetch-only floor (the same requests, bodies
 *     read and discarded); the faster floor counts.
 *   - a service across the internet: one 50 Mbit/s link shared by every
 *     answer and 100 ms per request, on a stand-in of BENCH_LINK_USERS
 *     (default min(BENCH_USERS, 100,000)) that compresses for whoever asks
 *     (ours, fetch and so the SDK do): our first sync between two runs of the
 *     fetch-only floor asking for compression (bodies read compressed and
 *     discarded; the faster counts), then the SDK loop.
 *   - BENCH_SYNC_3M=1: our first sync and re-sync of 3,000,000 users, for
 *     their peak RSS.
 *
 * The first-sync runs alternate ours, script, SDK; then the re-syncs in the
 * same order; so load from others on this shared machine hits all alike.
 * BENCH_ROUNDS (default 1) repeats the whole sequence with fresh databases
 * (even rounds in the reverse order) and reports the median of each scenario.
 * Peers on fewer users than ours compare by rate.
 *
 * Prints a markdown table of absolute figures and the ratios the goals are
 * set on, with the machine's load average before and after and what a
 * second busy thread adds on it (bench/cores.ts). Each scenario
 * checks that it stored every user (ours: a succeeded run that saw every
 * user; peers: the row count; the floor: every page answered), so a fast
 * wrong answer cannot pass.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FaultPlan } from '../src/stand-in/index.js';
import { syncExecArgv } from '../src/sync/child-process.js';
import type { RunResult, SyncRunRequest } from './sync-run.js';
import type { SyncStandInReady, SyncStandInRequest } from './sync-stand-in.js';
import { parallelScaling } from './cores.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const envInt = (name: string, fallback: number): number => {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  return n;
};
const USERS = envInt('BENCH_USERS', 100_000);
const SCRIPT_USERS = Math.min(envInt('BENCH_SCRIPT_USERS', USERS), USERS);
const SDK_USERS = Math.min(envInt('BENCH_PEER_USERS', Math.min(USERS, 100_000)), USERS);
const LATENCY_USERS = envInt('BENCH_LATENCY_USERS', Math.min(USERS, 200_000));
const LINK_USERS = envInt('BENCH_LINK_USERS', Math.min(USERS, 100_000));
/** The bandwidth scenario's link: a service across the internet. */
const LINK = { latencyMs: 100, bandwidthMbps: 50 } satisfies Partial<FaultPlan>;
const ROUNDS = envInt('BENCH_ROUNDS', 1);
const BIG = process.env.BENCH_SYNC_3M === '1' ? 3_000_000 : 0;
const MAX_RSS_MB = 200;

type Key =
  | 'ours-first'
  | 'script-first'
  | 'sdk-first'
  | 'ours-resync'
  | 'script-resync'
  | 'sdk-resync'
  | 'ours-latency'
  | 'floor'
  | 'floor-0'
  | 'ours-link'
  | 'sdk-link'
  | 'floor-link'
  | 'ours-3m-first'
  | 'ours-3m-resync';

interface Row {
  scenario: string;
  users: number;
  seconds: number;
  rate: number;
  peakRssMb: number;
  /** The WAL checkpoint the caller runs once the run's result is out (src/sync/exclusive-run.ts), not in `seconds`. */
  checkpointSeconds?: number;
  ratio: string;
  goal: string;
  pass: boolean | undefined;
}

interface StandInChild {
  ready: SyncStandInReady;
  send(msg: SyncStandInRequest): Promise<void>;
  close(): Promise<void>;
}

async function startStandInChild(users: number, compress = false): Promise<StandInChild> {
  const child: ChildProcess = fork(join(HERE, 'sync-stand-in.js'), [String(users), compress ? 'compress' : 'plain'], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
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

/**
 * Runs one scenario in a fresh process (bench/sync-run.ts), as the daemon runs
 * each sync: ours with the V8 flags the daemon gives its sync process, the
 * peers and the floor with Node's defaults.
 */
async function inChild(request: SyncRunRequest): Promise<RunResult> {
  const execArgv = request.kind === 'sync' ? syncExecArgv(process.execArgv) : process.execArgv;
  const child = fork(join(HERE, 'sync-run.js'), [JSON.stringify(request)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
  return new Promise<RunResult>((resolve, reject) => {
    let result: RunResult | undefined;
    child.once('message', (m) => (result = m as RunResult));
    child.once('exit', (code) => (result !== undefined ? resolve(result) : reject(new Error(`scenario process exited with ${code}`))));
  });
}

const runs = new Map<Key, { users: number; results: RunResult[] }>();

async function run(
  key: Key,
  what: string,
  s: SyncStandInReady,
  request: Omit<SyncRunRequest, 'baseUrl' | 'apiKey' | 'apiKeyHeader'>,
): Promise<void> {
  const r = await inChild({ baseUrl: s.baseUrl, apiKey: s.apiKey, apiKeyHeader: s.apiKeyHeader, ...request });
  process.stderr.write(
    `bench:sync:   ${what}: ${request.users} users in ${r.seconds.toFixed(2)} s, ${Math.round(request.users / r.seconds)} users/s, peak RSS ${Math.round(r.peakRssMb)} MB\n`,
  );
  const entry = runs.get(key) ?? { users: request.users, results: [] };
  entry.results.push(r);
  runs.set(key, entry);
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};

/** One scenario over its rounds: the median time (the floor: the fastest), the highest peak RSS. */
function row(key: Key, scenario: string, fastest = false): Row {
  const e = runs.get(key);
  if (e === undefined) throw new Error(`no runs of ${key}`);
  const seconds = fastest ? Math.min(...e.results.map((r) => r.seconds)) : median(e.results.map((r) => r.seconds));
  const checkpoints = e.results.flatMap((r) => (r.checkpointSeconds === undefined ? [] : [r.checkpointSeconds]));
  return {
    scenario,
    users: e.users,
    seconds,
    rate: e.users / seconds,
    peakRssMb: Math.max(...e.results.map((r) => r.peakRssMb)),
    checkpointSeconds: checkpoints.length > 0 ? median(checkpoints) : undefined,
    ratio: '',
    goal: 'reference',
    pass: undefined,
  };
}

/** Ours against the peers: `min` times each peer's rate. */
function judge(ours: Row, peers: ReadonlyArray<[Row, string, number]>): void {
  const parts = peers.map(([p, name, min]) => ({ name, min, times: ours.rate / p.rate }));
  ours.ratio = parts.map((p) => `${p.times.toFixed(2)}× ${p.name}`).join(', ');
  ours.goal = [...parts.map((p) => `≥ ${p.min}× ${p.name}`), `RSS ≤ ${MAX_RSS_MB} MB`].join(', ');
  ours.pass = parts.every((p) => p.times >= p.min) && ours.peakRssMb <= MAX_RSS_MB;
}

/** Ours, the script's and the SDK loop's rows of one phase, ours judged against both (goals: × the script, × the SDK loop). */
function compared(
  [phase, ours, script, sdk]: [phase: 'first' | 'resync', ours: string, script: string, sdk: string],
  [overScript, overSdk]: [number, number],
): [Row, Row, Row] {
  const rows: [Row, Row, Row] = [
    row(`ours-${phase}`, `ours: ${ours}`),
    row(`script-${phase}`, `competent script: ${script}`),
    row(`sdk-${phase}`, `SDK loop: ${sdk}`),
  ];
  judge(rows[0], [
    [rows[1], 'the script', overScript],
    [rows[2], 'the SDK loop', overSdk],
  ]);
  return rows;
}

function table(rows: readonly Row[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const head =
    '| scenario | users | seconds | users/s | then checkpoint s | peak RSS MB | ours vs peer | goal | result |\n|---|---:|---:|---:|---:|---:|---|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.scenario} | ${fmt(r.users)} | ${r.seconds.toFixed(2)} | ${fmt(r.rate)} | ${r.checkpointSeconds === undefined ? '-' : r.checkpointSeconds.toFixed(2)} | ${fmt(r.peakRssMb)} | ${r.ratio || '-'} | ${r.goal} | ${r.pass === undefined ? '-' : r.pass ? 'pass' : 'FAIL'} |`,
  );
  return [head, ...body].join('\n');
}

async function main(): Promise<void> {
  const loadBefore = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const cores = await parallelScaling();
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-sync-'));
  const rows: Row[] = [];
  const fmt = (n: number) => n.toLocaleString('en-US');
  process.stderr.write(
    `bench:sync: stand-ins of ${fmt(USERS)} and ${fmt(LATENCY_USERS)} users (child processes); ours on ${fmt(USERS)}, the script on ${fmt(SCRIPT_USERS)}, the SDK loop on ${fmt(SDK_USERS)}; ${ROUNDS} round(s)\n`,
  );
  const full = await startStandInChild(USERS);
  const slow = await startStandInChild(LATENCY_USERS);
  const link = await startStandInChild(LINK_USERS, true);
  try {
    await slow.send({ op: 'faults', plan: { latencyMs: 100 } satisfies Partial<FaultPlan> });
    await link.send({ op: 'faults', plan: LINK });
    const m = full.ready;
    for (let round = 1; round <= ROUNDS; round++) {
      process.stderr.write(`bench:sync: round ${round}/${ROUNDS}\n`);
      const db = (name: string) => join(dir, `${name}-${round}.db`);
      const steps: Array<[Key, Key, () => Promise<void>, () => Promise<void>]> = [
        [
          'ours-first',
          'ours-resync',
          () =>
            run('ours-first', 'ours, first sync', m, { kind: 'sync', dbPath: db('ours'), users: USERS, concurrency: 4, connections: 8 }),
          () => run('ours-resync', 'ours, re-sync', m, { kind: 'sync', dbPath: db('ours'), users: USERS, concurrency: 4, connections: 8 }),
        ],
        [
          'script-first',
          'script-resync',
          () =>
            run('script-first', 'script, first sync', m, {
              kind: 'script',
              dbPath: db('script'),
              users: SCRIPT_USERS,
              concurrency: 4,
              connections: 4,
            }),
          () =>
            run('script-resync', 'script, re-sync', m, {
              kind: 'script',
              dbPath: db('script'),
              users: SCRIPT_USERS,
              concurrency: 4,
              connections: 4,
              expectUnchanged: true,
            }),
        ],
        [
          'sdk-first',
          'sdk-resync',
          () =>
            run('sdk-first', 'SDK loop, first sync', m, {
              kind: 'sdk',
              dbPath: db('sdk'),
              users: SDK_USERS,
              concurrency: 1,
              connections: 1,
            }),
          () =>
            run('sdk-resync', 'SDK loop, re-sync', m, { kind: 'sdk', dbPath: db('sdk'), users: SDK_USERS, concurrency: 1, connections: 1 }),
        ],
      ];
      if (round % 2 === 0) steps.reverse();
      for (const [, , first] of steps) await first();
      for (const [, , , again] of steps) await again();
      // What the re-sync is up against: the same requests with nothing done with the bodies.
      await run('floor-0', 'fetch-only, no added latency', m, {
        kind: 'fetch-only',
        dbPath: '',
        users: USERS,
        concurrency: 4,
        connections: 8,
      });
      /**
       * A far service's first sync: ours between two runs of its fetch-only floor (the faster counts),
       * at concurrency 8; then, where given, the SDK loop.
       */
      const far = async (child: StandInChild, users: number, name: 'latency' | 'link', compressed: boolean): Promise<void> => {
        const label = name === 'latency' ? '100 ms latency' : '50 Mbit/s + 100 ms';
        const request = { dbPath: '', users, concurrency: 8, connections: 8 };
        const floor = () =>
          run(name === 'latency' ? 'floor' : 'floor-link', `fetch-only, ${label}`, child.ready, {
            ...request,
            kind: 'fetch-only',
            compressed,
          });
        await floor();
        await run(name === 'latency' ? 'ours-latency' : 'ours-link', `ours, ${label}`, child.ready, {
          ...request,
          kind: 'sync',
          dbPath: db(name),
        });
        await floor();
      };
      await far(slow, LATENCY_USERS, 'latency', false);
      // A service across the internet: 100 ms and one 50 Mbit/s link, compressed for whoever asks.
      await far(link, LINK_USERS, 'link', true);
      await run('sdk-link', 'SDK loop, 50 Mbit/s + 100 ms', link.ready, {
        kind: 'sdk',
        dbPath: db('sdk-link'),
        users: LINK_USERS,
        concurrency: 1,
        connections: 1,
      });
      for (const name of ['ours', 'script', 'sdk', 'latency', 'link', 'sdk-link'])
        for (const ext of ['', '-wal', '-shm']) rmSync(db(name) + ext, { force: true });
    }
  } finally {
    await link.close();
    await slow.close();
    await full.close();
  }

  const [ours1, script1, sdk1] = compared(
    [
      'first',
      'first sync (concurrency 4)',
      'first sync (4 in flight, one transaction)',
      'first sync (page at a time, transaction per page)',
    ],
    [1.3, 5],
  );
  const [ours2, script2, sdk2] = compared(
    ['resync', 're-sync unchanged (concurrency 4)', 're-sync unchanged', 're-sync unchanged'],
    [3, 25],
  );
  const floor0 = row('floor-0', 'fetch-only floor: no added latency (concurrency 4), bodies discarded');
  floor0.goal = 'floor: the stand-in and HTTP alone';
  ours2.ratio += `; ${((ours2.rate / floor0.rate) * 100).toFixed(0)}% of fetch-only`;
  const latency = row('ours-latency', 'ours: first sync, 100 ms latency (concurrency 8)');
  const floor = row('floor', 'fetch-only floor: 100 ms latency (concurrency 8), bodies discarded', true);
  const share = latency.rate / floor.rate;
  latency.ratio = `${(share * 100).toFixed(0)}% of fetch-only`;
  latency.goal = `≥ 85% of fetch-only, RSS ≤ ${MAX_RSS_MB} MB`;
  latency.pass = share >= 0.85 && latency.peakRssMb <= MAX_RSS_MB;
  floor.goal = 'floor (the faster of 2 runs)';
  const linkOurs = row('ours-link', 'ours: first sync, 50 Mbit/s + 100 ms, compressed (concurrency 8)');
  const linkFloor = row('floor-link', 'fetch-only floor: 50 Mbit/s + 100 ms, compressed (concurrency 8), bodies discarded', true);
  const linkSdk = row('sdk-link', 'SDK loop: first sync, 50 Mbit/s + 100 ms (fetch asks for compression)');
  const linkShare = linkOurs.rate / linkFloor.rate;
  const linkVsSdk = linkOurs.rate / linkSdk.rate;
  linkOurs.ratio = `${(linkShare * 100).toFixed(0)}% of fetch-only; ${linkVsSdk.toFixed(2)}× the SDK loop`;
  linkOurs.goal = '≥ 85% of the compressed fetch-only, ≥ 5× the SDK loop';
  linkOurs.pass = linkShare >= 0.85 && linkVsSdk >= 5;
  linkFloor.goal = 'floor (the faster of 2 runs)';
  rows.push(ours1, script1, sdk1, ours2, script2, sdk2, floor0, latency, floor, linkOurs, linkFloor, linkSdk);

  if (BIG > 0) {
    process.stderr.write(`bench:sync: ${fmt(BIG)} users, our first sync and re-sync, for peak RSS\n`);
    const big = await startStandInChild(BIG);
    try {
      const dbPath = join(dir, 'big.db');
      await run('ours-3m-first', 'ours, first sync, 3M', big.ready, { kind: 'sync', dbPath, users: BIG, concurrency: 4, connections: 8 });
      await run('ours-3m-resync', 'ours, re-sync, 3M', big.ready, { kind: 'sync', dbPath, users: BIG, concurrency: 4, connections: 8 });
    } finally {
      await big.close();
    }
    for (const [key, name] of [
      ['ours-3m-first', 'ours: first sync, 3M users (concurrency 4)'],
      ['ours-3m-resync', 'ours: re-sync unchanged, 3M users (concurrency 4)'],
    ] as const) {
      const r = row(key, name);
      r.goal = `peak RSS ≤ ${MAX_RSS_MB} MB`;
      r.pass = r.peakRssMb <= MAX_RSS_MB;
      rows.push(r);
    }
  }
  rmSync(dir, { recursive: true, force: true });

  process.stdout.write(
    `\n${table(rows)}\n\nnode ${process.version}, ${cpus().length} CPUs, two busy threads doing ${cores.scaling.toFixed(2)}× the work of one (bench/cores.ts); ${ROUNDS} round(s), median of each (the floor: the fastest run); the stand-ins and each scenario in processes of their own; users/s end to end; ours' WAL checkpoint after the run shown apart (the peers checkpoint as they go, SQLite's default).\nload average (1/5/15 min) before: ${loadBefore}, after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}\n`,
  );
}

await main();
