/**
 * `npm run bench:sync`: the sync path against the stand-in over loopback,
 * measured against honest peers in the same run, on the same stand-in, each
 * timed as a user times it: the whole process, from spawn to exit. The
 * stand-in runs in a child process (its own core); every scenario is a
 * process of its own, started and timed from here, with its peak RSS taken
 * the same way for all (GNU time's maximum resident set size, `%M`):
 *
 *   - ours: `node dist/cli.js sync --once` as a user runs it (start-up, the
 *     run, the WAL checkpoint after it, the exit), configured by the
 *     environment alone to the stand-in and a fresh MIRROR_DB: first sync of
 *     BENCH_USERS (default 100,000, concurrency 4), then a re-sync of the
 *     same, unchanged
 *   - the competent script (bench/peer-script.ts) on BENCH_SCRIPT_USERS
 *     (default BENCH_USERS): 4 pages in flight, one transaction, upserts that
 *     skip unchanged rows, WAL. First sync and re-sync unchanged.
 *   - the official SDK's plain loop (bench/peer-sdk.ts) on BENCH_PEER_USERS
 *     (default min(BENCH_USERS, 100,000)): a page at a time, a transaction
 *     per page. First sync and re-sync.
 *   - the fetch-only floor (bench/fetch-only.ts) with no added latency
 *     (concurrency 4), after the re-syncs: the stand-in and HTTP alone, what
 *     a re-sync is up against
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
 * Prints a markdown table of whole-process figures, the time each process
 * gave its work inside it beside them (ours: the engine's run and the
 * checkpoint, from its log), and the ratios, goals (the project's targets) and
 * whether each is met, all on whole-process time; with the machine's load
 * average before and after and what a second busy thread adds on it
 * (bench/cores.ts). Each scenario is checked once its process has exited
 * (ours: exit code 0 and a succeeded run in sync_runs that saw every user;
 * peers: the row count; the floor: every page answered), so a fast wrong
 * answer cannot pass.
 */
import Database from 'better-sqlite3';
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV } from '../src/runtime/config.js';
import type { FaultPlan } from '../src/stand-in/index.js';
import type { FetchOnlyRequest } from './fetch-only.js';
import type { ScenarioReport } from './scenario-process.js';
import type { SyncStandInReady, SyncStandInRequest } from './sync-stand-in.js';
import { parallelScaling } from './cores.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** The bin `user-mirror`, as `npm run build` writes it. */
const CLI = join(HERE, '..', 'cli.js');
/** GNU time: the maximum resident set size of the process it runs, from the kernel's accounting at its exit. */
const TIME = '/usr/bin/time';
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
/** MAX_PAGE_LIMIT: the page every scenario asks for. */
const PAGE = 500;

/** Issue 32's targets, on whole-process time (same run, same machine). */
const GOALS = {
  firstOverScript: 1.3,
  resyncOverScript: 3,
  latencyShareOfFloor: 0.9,
  linkShareOfFloor: 0.85,
  linkOverSdk: 5,
  maxRssMbAt3M: 200,
} as const;

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

/** One scenario process, measured from here. */
interface RunResult {
  /** Spawn to exit: what the table's ratios and goals are on. */
  wallSeconds: number;
  /** The kernel's maximum resident set size of the process (GNU time's `%M`). */
  peakRssMb: number;
  /** The work's time inside the process: ours, the engine's run (its log's `sync.finished`); the others, their own clock around the work. */
  runSeconds?: number;
  /** Ours: the WAL checkpoint after the run (its log's `sync.checkpoint`), inside the wall time. */
  checkpointSeconds?: number;
}

interface Row {
  scenario: string;
  users: number;
  wallSeconds: number;
  runSeconds?: number;
  checkpointSeconds?: number;
  /** Users per second of whole-process time. */
  rate: number;
  peakRssMb: number;
  ratio: string;
  goal: string;
  met: boolean | undefined;
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
 * The environment every scenario process starts with: this one's, less every
 * variable of ours (and its `_FILE` form, the credentials folder, any .env),
 * so that nothing of the shell that runs the bench configures a scenario.
 */
function scenarioEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(ENV)) {
    delete env[name];
    delete env[`${name}_FILE`];
  }
  delete env.CREDENTIALS_DIRECTORY;
  return { ...env, ENV_FILE: '/dev/null' };
}

interface Exited {
  wallSeconds: number;
  peakRssMb: number;
  stdout: string;
}

let spawned = 0;
const tail = (text: string): string => text.trim().split('\n').slice(-15).join('\n');

/**
 * Runs `node <args>` under GNU time and waits for its exit: the wall
 * time from spawn to exit, measured here (GNU time's own fork and wait are
 * inside it, well under a millisecond), and the process's peak RSS. Its
 * stdout and stderr go to files in `dir`, as a cron job's would, so no process
 * believes it runs at a terminal and none waits on a pipe to this one. A
 * process that exits other than 0 fails the bench, with what it printed.
 * The node is this one's, with this one's flags (none, unless the bench is
 * run under --cpu-prof, which every scenario then inherits alike), in this
 * one's working directory.
 */
async function timedProcess(dir: string, what: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<Exited> {
  const base = join(dir, `process-${++spawned}`);
  const out = openSync(`${base}.out`, 'w');
  const err = openSync(`${base}.err`, 'w');
  let seconds: number;
  let code: number | null;
  let signal: NodeJS.Signals | null;
  try {
    const started = performance.now();
    const child = spawn(TIME, ['-f', '%M', '-o', `${base}.rss`, process.execPath, ...process.execArgv, ...args], {
      env,
      stdio: ['ignore', out, err],
    });
    [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (c, s) => resolve([c, s]));
    });
    seconds = (performance.now() - started) / 1000;
  } finally {
    closeSync(out);
    closeSync(err);
  }
  const stdout = readFileSync(`${base}.out`, 'utf8');
  if (code !== 0) {
    throw new Error(
      `${what}: exited with ${code ?? signal}\n--- stderr:\n${tail(readFileSync(`${base}.err`, 'utf8'))}\n--- stdout:\n${tail(stdout)}`,
    );
  }
  // On a non-zero exit GNU time writes a line before the figure; the figure is the last line.
  const kb = Number(readFileSync(`${base}.rss`, 'utf8').trim().split('\n').at(-1));
  if (!Number.isFinite(kb) || kb <= 0) throw new Error(`${what}: no peak RSS from ${TIME}`);
  return { wallSeconds: seconds, peakRssMb: kb / 1024, stdout };
}

/** The JSON lines a process printed (ours: its pino log; the others: their ScenarioReport, last). */
function jsonLines(stdout: string): Array<Record<string, unknown>> {
  return stdout.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

function report<T extends object>(stdout: string, what: string): ScenarioReport<Partial<T>> {
  const last = jsonLines(stdout).at(-1);
  if (typeof last?.runSeconds !== 'number') throw new Error(`${what}: printed no report; stdout:\n${tail(stdout)}`);
  return last as ScenarioReport<Partial<T>>;
}

/** What a scenario runs against: a stand-in, the folder its process runs in, how many users it mirrors. */
interface Target {
  standIn: SyncStandInReady;
  dir: string;
  users: number;
}

/** Our sync as a user runs it: `node dist/cli.js sync --once`, configured by the environment. */
async function oursProcess(t: Target, dbPath: string, concurrency: number): Promise<RunResult> {
  const what = `sync --once over ${t.users} users`;
  const p = await timedProcess(t.dir, what, [CLI, 'sync', '--once', '--concurrency', String(concurrency)], {
    ...scenarioEnv(),
    SERVICE_BASE_URL: t.standIn.baseUrl,
    SERVICE_API_KEY: t.standIn.apiKey,
    SERVICE_API_KEY_HEADER: t.standIn.apiKeyHeader,
    MIRROR_DB: dbPath,
    LOG_LEVEL: 'info',
  });
  // The run it recorded: succeeded, and saw every user.
  const db = new Database(dbPath, { readonly: true });
  try {
    const run = db
      .prepare<[], { status: string; users_seen: number }>('SELECT status, users_seen FROM sync_runs ORDER BY id DESC LIMIT 1')
      .get();
    if (run?.status !== 'succeeded' || run.users_seen !== t.users)
      throw new Error(`${what}: expected a succeeded run over ${t.users} users in sync_runs, got ${JSON.stringify(run)}`);
  } finally {
    db.close();
  }
  const log = jsonLines(p.stdout);
  const number = (event: string, field: string): number | undefined => {
    const v = log.find((l) => l.event === event)?.[field];
    return typeof v === 'number' ? v / 1000 : undefined;
  };
  return {
    wallSeconds: p.wallSeconds,
    peakRssMb: p.peakRssMb,
    runSeconds: number('sync.finished', 'durationMs'),
    checkpointSeconds: number('sync.checkpoint', 'ms'),
  };
}

/** Rows stored by a peer: the check that it stored every user. */
function expectRows(dbPath: string, users: number, what: string): void {
  const db = new Database(dbPath, { readonly: true });
  try {
    const n = db.prepare<[], number>('SELECT count(*) FROM users').pluck().get();
    if (n !== users) throw new Error(`${what}: expected ${users} users stored, found ${n}`);
  } finally {
    db.close();
  }
}

/** A peer's script (bench/peer-script.ts, bench/peer-sdk.ts) as its own process. */
async function peerProcess(t: Target, kind: 'script' | 'sdk', dbPath: string, expectUnchanged = false): Promise<RunResult> {
  const what = `${kind} over ${t.users} users`;
  const { baseUrl, apiKey, apiKeyHeader } = t.standIn;
  const options = { baseUrl, apiKey, apiKeyHeader, dbPath, maxUsers: t.users };
  const p = await timedProcess(t.dir, what, [join(HERE, `peer-${kind}.js`), JSON.stringify(options)], scenarioEnv());
  const r = report<{ changed: number }>(p.stdout, what);
  expectRows(dbPath, t.users, what);
  // A re-sync of an unchanged directory must change nothing: the script's skip has to work to count.
  if (expectUnchanged && r.changed !== 0) throw new Error(`${what}: re-sync changed ${r.changed} rows`);
  return { wallSeconds: p.wallSeconds, peakRssMb: p.peakRssMb, runSeconds: r.runSeconds };
}

/** The fetch-only floor (bench/fetch-only.ts) as its own process. */
async function floorProcess(t: Target, concurrency: number, compressed: boolean): Promise<RunResult> {
  const what = `fetch-only over ${t.users} users`;
  const { baseUrl, apiKey, apiKeyHeader } = t.standIn;
  const request: FetchOnlyRequest = { baseUrl, apiKey, apiKeyHeader, users: t.users, concurrency, connections: 8, compressed };
  const p = await timedProcess(t.dir, what, [join(HERE, 'fetch-only.js'), JSON.stringify(request)], scenarioEnv());
  const r = report<{ pages: number; bytes: number }>(p.stdout, what);
  // Every page answered 200 with a body of about the size the sync reads.
  const pages = Math.ceil(t.users / PAGE);
  if (r.pages !== pages || (r.bytes ?? 0) < t.users * (compressed ? 20 : 100))
    throw new Error(`${what}: ${r.pages}/${pages} pages, ${r.bytes} bytes`);
  return { wallSeconds: p.wallSeconds, peakRssMb: p.peakRssMb, runSeconds: r.runSeconds };
}

const runs = new Map<Key, { users: number; results: RunResult[] }>();

async function run(key: Key, what: string, users: number, scenario: () => Promise<RunResult>): Promise<void> {
  const r = await scenario();
  const inside = [
    r.runSeconds === undefined ? undefined : `run ${r.runSeconds.toFixed(2)} s`,
    r.checkpointSeconds === undefined ? undefined : `checkpoint ${r.checkpointSeconds.toFixed(2)} s`,
  ].filter((s) => s !== undefined);
  process.stderr.write(
    `bench:sync:   ${what}: ${users} users in ${r.wallSeconds.toFixed(2)} s wall${inside.length > 0 ? ` (${inside.join(', ')})` : ''}, ${Math.round(users / r.wallSeconds)} users/s, peak RSS ${Math.round(r.peakRssMb)} MB\n`,
  );
  const entry = runs.get(key) ?? { users, results: [] };
  entry.results.push(r);
  runs.set(key, entry);
}

const median = (xs: readonly number[]): number | undefined => {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid] : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};

/** One scenario over its rounds: the median of each figure (the floor: its fastest run by wall time), the highest peak RSS. */
function row(key: Key, scenario: string, fastest = false): Row {
  const e = runs.get(key);
  if (e === undefined) throw new Error(`no runs of ${key}`);
  const results = fastest ? [e.results.reduce((a, b) => (b.wallSeconds < a.wallSeconds ? b : a))] : e.results;
  const figures = (pick: (r: RunResult) => number | undefined) => median(results.flatMap((r) => pick(r) ?? []));
  const wallSeconds = figures((r) => r.wallSeconds) as number;
  return {
    scenario,
    users: e.users,
    wallSeconds,
    runSeconds: figures((r) => r.runSeconds),
    checkpointSeconds: figures((r) => r.checkpointSeconds),
    rate: e.users / wallSeconds,
    peakRssMb: Math.max(...e.results.map((r) => r.peakRssMb)),
    ratio: '',
    goal: '-',
    met: undefined,
  };
}

const times = (ours: Row, peer: Row): number => ours.rate / peer.rate;
const percent = (share: number): string => `${(share * 100).toFixed(0)}%`;

function table(rows: readonly Row[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const s = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(2));
  const head =
    '| scenario | users | wall s | run s | checkpoint s | users/s | peak RSS MB | ours vs peer | goal | met |\n|---|---:|---:|---:|---:|---:|---:|---|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.scenario} | ${fmt(r.users)} | ${s(r.wallSeconds)} | ${s(r.runSeconds)} | ${s(r.checkpointSeconds)} | ${fmt(r.rate)} | ${fmt(r.peakRssMb)} | ${r.ratio || '-'} | ${r.goal} | ${r.met === undefined ? '-' : r.met ? 'yes' : 'no'} |`,
  );
  return [head, ...body].join('\n');
}

async function main(): Promise<void> {
  if (!existsSync(TIME)) throw new Error(`bench:sync takes each process's peak RSS from GNU time (${TIME}, Debian's package 'time')`);
  if (!existsSync(CLI)) throw new Error(`bench:sync runs ${CLI}: npm run build first`);
  const loadBefore = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const cores = await parallelScaling();
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-sync-'));
  const rows: Row[] = [];
  const fmt = (n: number) => n.toLocaleString('en-US');
  process.stderr.write(
    `bench:sync: stand-ins of ${fmt(USERS)}, ${fmt(LATENCY_USERS)} and ${fmt(LINK_USERS)} users (child processes); ours on ${fmt(USERS)}, the script on ${fmt(SCRIPT_USERS)}, the SDK loop on ${fmt(SDK_USERS)}; each a whole process, timed from spawn to exit; ${ROUNDS} round(s)\n`,
  );
  const full = await startStandInChild(USERS);
  const slow = await startStandInChild(LATENCY_USERS);
  const link = await startStandInChild(LINK_USERS, true);
  const on = (s: StandInChild, users: number): Target => ({ standIn: s.ready, dir, users });
  try {
    await slow.send({ op: 'faults', plan: { latencyMs: 100 } satisfies Partial<FaultPlan> });
    await link.send({ op: 'faults', plan: LINK });
    for (let round = 1; round <= ROUNDS; round++) {
      process.stderr.write(`bench:sync: round ${round}/${ROUNDS}\n`);
      const db = (name: string) => join(dir, `${name}-${round}.db`);
      const ours = on(full, USERS);
      const script = on(full, SCRIPT_USERS);
      const sdk = on(full, SDK_USERS);
      const steps: Array<[first: () => Promise<void>, again: () => Promise<void>]> = [
        [
          () => run('ours-first', 'ours, first sync', USERS, () => oursProcess(ours, db('ours'), 4)),
          () => run('ours-resync', 'ours, re-sync', USERS, () => oursProcess(ours, db('ours'), 4)),
        ],
        [
          () => run('script-first', 'script, first sync', SCRIPT_USERS, () => peerProcess(script, 'script', db('script'))),
          () => run('script-resync', 'script, re-sync', SCRIPT_USERS, () => peerProcess(script, 'script', db('script'), true)),
        ],
        [
          () => run('sdk-first', 'SDK loop, first sync', SDK_USERS, () => peerProcess(sdk, 'sdk', db('sdk'))),
          () => run('sdk-resync', 'SDK loop, re-sync', SDK_USERS, () => peerProcess(sdk, 'sdk', db('sdk'))),
        ],
      ];
      if (round % 2 === 0) steps.reverse();
      for (const [first] of steps) await first();
      for (const [, again] of steps) await again();
      // What the re-sync is up against: the same requests with nothing done with the bodies.
      await run('floor-0', 'fetch-only, no added latency', USERS, () => floorProcess(ours, 4, false));
      /** A far service's first sync: ours between two runs of its fetch-only floor (the faster counts), at concurrency 8. */
      const far = async (target: Target, name: 'latency' | 'link'): Promise<void> => {
        const label = name === 'latency' ? '100 ms latency' : '50 Mbit/s + 100 ms';
        const compressed = name === 'link';
        const floor = () =>
          run(name === 'latency' ? 'floor' : 'floor-link', `fetch-only, ${label}`, target.users, () => floorProcess(target, 8, compressed));
        await floor();
        await run(name === 'latency' ? 'ours-latency' : 'ours-link', `ours, ${label}`, target.users, () =>
          oursProcess(target, db(name), 8),
        );
        await floor();
      };
      await far(on(slow, LATENCY_USERS), 'latency');
      // A service across the internet: 100 ms and one 50 Mbit/s link, compressed for whoever asks.
      const across = on(link, LINK_USERS);
      await far(across, 'link');
      await run('sdk-link', 'SDK loop, 50 Mbit/s + 100 ms', LINK_USERS, () => peerProcess(across, 'sdk', db('sdk-link')));
      for (const name of ['ours', 'script', 'sdk', 'latency', 'link', 'sdk-link'])
        for (const ext of ['', '-wal', '-shm', '-journal']) rmSync(db(name) + ext, { force: true });
    }
  } finally {
    await link.close();
    await slow.close();
    await full.close();
  }

  const ours1 = row('ours-first', 'ours: first sync, `sync --once` (concurrency 4)');
  const script1 = row('script-first', 'competent script: first sync (4 in flight, one transaction)');
  const sdk1 = row('sdk-first', 'SDK loop: first sync (page at a time, transaction per page)');
  ours1.ratio = `${times(ours1, script1).toFixed(2)}× the script, ${times(ours1, sdk1).toFixed(2)}× the SDK loop`;
  ours1.goal = `≥ ${GOALS.firstOverScript}× the script`;
  ours1.met = times(ours1, script1) >= GOALS.firstOverScript;
  const ours2 = row('ours-resync', 'ours: re-sync unchanged, `sync --once` (concurrency 4)');
  const script2 = row('script-resync', 'competent script: re-sync unchanged');
  const sdk2 = row('sdk-resync', 'SDK loop: re-sync unchanged');
  const floor0 = row('floor-0', 'fetch-only floor: no added latency (concurrency 4), bodies discarded');
  ours2.ratio = `${times(ours2, script2).toFixed(2)}× the script, ${times(ours2, sdk2).toFixed(2)}× the SDK loop; ${percent(times(ours2, floor0))} of fetch-only`;
  ours2.goal = `≥ ${GOALS.resyncOverScript}× the script`;
  ours2.met = times(ours2, script2) >= GOALS.resyncOverScript;
  const latency = row('ours-latency', 'ours: first sync, 100 ms latency (concurrency 8)');
  const floor = row('floor', 'fetch-only floor: 100 ms latency (concurrency 8), bodies discarded; the faster of 2 runs', true);
  latency.ratio = `${percent(times(latency, floor))} of fetch-only`;
  latency.goal = `≥ ${percent(GOALS.latencyShareOfFloor)} of fetch-only`;
  latency.met = times(latency, floor) >= GOALS.latencyShareOfFloor;
  const linkOurs = row('ours-link', 'ours: first sync, 50 Mbit/s + 100 ms, compressed (concurrency 8)');
  const linkFloor = row(
    'floor-link',
    'fetch-only floor: 50 Mbit/s + 100 ms, compressed (concurrency 8), bodies discarded; the faster of 2 runs',
    true,
  );
  const linkSdk = row('sdk-link', 'SDK loop: first sync, 50 Mbit/s + 100 ms (fetch asks for compression)');
  linkOurs.ratio = `${percent(times(linkOurs, linkFloor))} of fetch-only; ${times(linkOurs, linkSdk).toFixed(2)}× the SDK loop`;
  linkOurs.goal = `≥ ${percent(GOALS.linkShareOfFloor)} of the compressed fetch-only, ≥ ${GOALS.linkOverSdk}× the SDK loop`;
  linkOurs.met = times(linkOurs, linkFloor) >= GOALS.linkShareOfFloor && times(linkOurs, linkSdk) >= GOALS.linkOverSdk;
  rows.push(ours1, script1, sdk1, ours2, script2, sdk2, floor0, latency, floor, linkOurs, linkFloor, linkSdk);

  if (BIG > 0) {
    process.stderr.write(`bench:sync: ${fmt(BIG)} users, our first sync and re-sync, for peak RSS\n`);
    const big = await startStandInChild(BIG);
    try {
      const target = on(big, BIG);
      const dbPath = join(dir, 'big.db');
      await run('ours-3m-first', 'ours, first sync, 3M', BIG, () => oursProcess(target, dbPath, 4));
      await run('ours-3m-resync', 'ours, re-sync, 3M', BIG, () => oursProcess(target, dbPath, 4));
    } finally {
      await big.close();
    }
    for (const [key, name] of [
      ['ours-3m-first', 'ours: first sync, 3M users, `sync --once` (concurrency 4)'],
      ['ours-3m-resync', 'ours: re-sync unchanged, 3M users, `sync --once` (concurrency 4)'],
    ] as const) {
      const r = row(key, name);
      r.goal = `peak RSS ≤ ${GOALS.maxRssMbAt3M} MB`;
      r.met = r.peakRssMb <= GOALS.maxRssMbAt3M;
      rows.push(r);
    }
  }
  rmSync(dir, { recursive: true, force: true });

  process.stdout.write(
    `\n${table(rows)}\n\nnode ${process.version}, ${cpus().length} CPUs, two busy threads doing ${cores.scaling.toFixed(2)}× the work of one (bench/cores.ts); ${ROUNDS} round(s), median of each (the floor: the fastest run); the stand-ins in processes of their own. wall s: each scenario's whole process from spawn to exit (ours: \`node dist/cli.js sync --once\`, start-up and the WAL checkpoint after the run included), what users/s, the ratios and the goals are on; run s: the work's time inside the process (ours: the engine's run, from its log; the others: their own clock around the work); checkpoint s: ours' checkpoint after the run, inside wall s; peak RSS: GNU time's maximum resident set size. Goals are set at 100,000 users (the first sync also at 1,000,000) and peak RSS at 3,000,000 (BENCH_SYNC_3M=1).\nload average (1/5/15 min) before: ${loadBefore}, after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}\n`,
  );
}

await main();
