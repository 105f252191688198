/**
 * bench:sync's scenario processes, each started and timed from the bench
 * (bench/sync.ts) as a user times theirs: ours (`node dist/cli.js sync
 * --once`), the peers (bench/peer-script.ts, bench/peer-sdk.ts) and the
 * fetch-only floor (bench/fetch-only.ts), against a stand-in in a child
 * process of its own (bench/sync-stand-in.ts). Each is checked once it has
 * exited, so that a fast wrong answer cannot pass.
 */
import Database from 'better-sqlite3';
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV } from '../src/runtime/config.js';
import { pin, TASKSET } from './affinity.js';
import type { FetchOnlyRequest } from './fetch-only.js';
import type { ScenarioReport } from './scenario-process.js';
import type { SyncStandInReady, SyncStandInRequest } from './sync-stand-in.js';

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** The bin `user-mirror`, as `npm run build` writes it. */
export const CLI = join(HERE, '..', 'cli.js');
/** GNU time: the peak RSS and CPU time of the process it runs (and of the children it waited for), from the kernel's accounting at its exit. */
export const TIME = '/usr/bin/time';
/** MAX_PAGE_LIMIT: the page every scenario asks for. */
const PAGE = 500;

/** One scenario process, measured from here. */
export interface RunResult {
  /** Spawn to exit: what the table's ratios and goals are on. */
  wallSeconds: number;
  /** User and system CPU time of the process and the children it waited for (GNU time's `%U` + `%S`). */
  cpuSeconds: number;
  /** The kernel's maximum resident set size of the process (GNU time's `%M`). */
  peakRssMb: number;
  /** The work's time inside the process: ours, the engine's run (its log's `sync.finished`); the others, their own clock around the work. */
  runSeconds?: number;
  /** Ours: the WAL checkpoint after the run (its log's `sync.checkpoint`), inside the wall time. */
  checkpointSeconds?: number;
}

export interface StandInChild {
  ready: SyncStandInReady;
  send(msg: SyncStandInRequest): Promise<void>;
  /** Holds the stand-in (every thread of it) to `cpus`, until pinned again. */
  pin(cpus: readonly number[]): void;
  close(): Promise<void>;
}

export async function startStandInChild(users: number, compress = false): Promise<StandInChild> {
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
    pin: (cpus) => pin(child.pid as number, cpus),
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
  cpuSeconds: number;
  stdout: string;
}

let spawned = 0;
const tail = (text: string): string => text.trim().split('\n').slice(-15).join('\n');

/**
 * Runs `node <args>` under GNU time and waits for its exit: the wall
 * time from spawn to exit, measured here (GNU time's own fork and wait are
 * inside it, well under a millisecond), the process's peak RSS and CPU
 * time; `cpus`, when given, holds the process to those CPUs (taskset). Its
 * stdout and stderr go to files in `dir`, as a cron job's would, so no process
 * believes it runs at a terminal and none waits on a pipe to this one. A
 * process that exits other than 0 fails the bench, with what it printed.
 * The node is this one's, with this one's flags (none, unless the bench is
 * run under --cpu-prof, which every scenario then inherits alike), in this
 * one's working directory.
 */
async function timedProcess(
  dir: string,
  what: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  cpus?: readonly number[],
): Promise<Exited> {
  const base = join(dir, `process-${++spawned}`);
  const out = openSync(`${base}.out`, 'w');
  const err = openSync(`${base}.err`, 'w');
  let seconds: number;
  let code: number | null;
  let signal: NodeJS.Signals | null;
  try {
    const started = performance.now();
    const pinned = cpus === undefined ? [] : [TASKSET, '-c', cpus.join(',')];
    const node = [process.execPath, ...process.execArgv, ...args];
    const child = spawn(TIME, ['-f', '%M %U %S', '-o', `${base}.time`, ...pinned, ...node], {
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
  // On a non-zero exit GNU time writes a line before the figures; the figures are the last line.
  const [kb, user, sys] = (readFileSync(`${base}.time`, 'utf8').trim().split('\n').at(-1) ?? '').split(' ').map(Number);
  if (kb === undefined || !Number.isFinite(kb) || kb <= 0) throw new Error(`${what}: no peak RSS from ${TIME}`);
  if (user === undefined || sys === undefined || !Number.isFinite(user + sys)) throw new Error(`${what}: no CPU time from ${TIME}`);
  return { wallSeconds: seconds, peakRssMb: kb / 1024, cpuSeconds: user + sys, stdout };
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

/** What a scenario runs against: a stand-in, the folder its process runs in, how many users it mirrors, the CPUs it is held to (if any). */
export interface Target {
  standIn: SyncStandInReady;
  dir: string;
  users: number;
  cpus?: readonly number[];
}

/** Our sync as a user runs it: `node dist/cli.js sync --once`, configured by the environment. */
export async function oursProcess(t: Target, dbPath: string, concurrency: number): Promise<RunResult> {
  const what = `sync --once over ${t.users} users`;
  const p = await timedProcess(
    t.dir,
    what,
    [CLI, 'sync', '--once', '--concurrency', String(concurrency)],
    {
      ...scenarioEnv(),
      SERVICE_BASE_URL: t.standIn.baseUrl,
      SERVICE_API_KEY: t.standIn.apiKey,
      SERVICE_API_KEY_HEADER: t.standIn.apiKeyHeader,
      MIRROR_DB: dbPath,
      LOG_LEVEL: 'info',
    },
    t.cpus,
  );
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
    cpuSeconds: p.cpuSeconds,
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
export async function peerProcess(t: Target, kind: 'script' | 'sdk', dbPath: string, expectUnchanged = false): Promise<RunResult> {
  const what = `${kind} over ${t.users} users`;
  const { baseUrl, apiKey, apiKeyHeader } = t.standIn;
  const options = { baseUrl, apiKey, apiKeyHeader, dbPath, maxUsers: t.users };
  const p = await timedProcess(t.dir, what, [join(HERE, `peer-${kind}.js`), JSON.stringify(options)], scenarioEnv(), t.cpus);
  const r = report<{ changed: number }>(p.stdout, what);
  expectRows(dbPath, t.users, what);
  // A re-sync of an unchanged directory must change nothing: the script's skip has to work to count.
  if (expectUnchanged && r.changed !== 0) throw new Error(`${what}: re-sync changed ${r.changed} rows`);
  return { wallSeconds: p.wallSeconds, cpuSeconds: p.cpuSeconds, peakRssMb: p.peakRssMb, runSeconds: r.runSeconds };
}

/** The fetch-only floor (bench/fetch-only.ts) as its own process. */
export async function floorProcess(t: Target, concurrency: number, compressed: boolean): Promise<RunResult> {
  const what = `fetch-only over ${t.users} users`;
  const { baseUrl, apiKey, apiKeyHeader } = t.standIn;
  const request: FetchOnlyRequest = { baseUrl, apiKey, apiKeyHeader, users: t.users, concurrency, connections: 8, compressed };
  const p = await timedProcess(t.dir, what, [join(HERE, 'fetch-only.js'), JSON.stringify(request)], scenarioEnv(), t.cpus);
  const r = report<{ pages: number; bytes: number }>(p.stdout, what);
  // Every page answered 200 with a body of about the size the sync reads.
  const pages = Math.ceil(t.users / PAGE);
  if (r.pages !== pages || (r.bytes ?? 0) < t.users * (compressed ? 20 : 100))
    throw new Error(`${what}: ${r.pages}/${pages} pages, ${r.bytes} bytes`);
  return { wallSeconds: p.wallSeconds, cpuSeconds: p.cpuSeconds, peakRssMb: p.peakRssMb, runSeconds: r.runSeconds };
}
