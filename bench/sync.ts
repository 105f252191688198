/**
 * `npm run bench:sync`: the sync path against the stand-in over loopback,
 * measured against honest peers in the same run, on the same stand-in, each
 * timed as a user times it: the whole process, from spawn to exit. The
 * stand-in runs in a child process; every scenario is a process of its own,
 * started and timed from here, with its peak RSS and CPU time taken the same
 * way for all (GNU time's maximum resident set size, `%M`, and user + system
 * seconds, `%U` + `%S`, of the process and the children it waited for):
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
 *   - the pinned set-up: on a real host the service is remote, so here the
 *     stand-in of BENCH_USERS is held to one CPU (taskset, the last this
 *     process may use) while ours (first sync, re-sync), the script (first
 *     sync) and the fetch-only floor run as before, free on every CPU
 *     (BENCH_PIN_CONTESTANTS=1: held to the other CPUs). On fewer than 2 CPUs
 *     or without taskset its rows say so, with no figures.
 *   - BENCH_SYNC_3M=1: our first sync and re-sync of 3,000,000 users, for
 *     their peak RSS.
 *
 * The first-sync runs alternate ours, script, SDK; then the re-syncs in the
 * same order; so load from others on this shared machine hits all alike.
 * BENCH_ROUNDS (default 1) repeats the whole sequence with fresh databases
 * (even rounds in the reverse order) and reports the median of each scenario.
 * Peers on fewer users than ours compare by rate.
 *
 * Prints a markdown table of whole-process figures (wall and CPU seconds),
 * the time each process gave its work inside it beside them (ours: the
 * engine's run and the checkpoint, from its log), and the ratios, goals
 * (bench/goals.ts) and whether each is met, on whole-process wall time; with
 * the machine's load average before and after and what a second busy thread
 * adds on it (bench/cores.ts). Each scenario is checked once its process has exited
 * (ours: exit code 0 and a succeeded run in sync_runs that saw every user;
 * peers: the row count; the floor: every page answered), so a fast wrong
 * answer cannot pass.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FaultPlan } from '../src/stand-in/index.js';
import { affinityOf, TASKSET } from './affinity.js';
import { parallelScaling } from './cores.js';
import { allMet, atLeast, atMost, firstOverScriptGoal, FIRST_SYNC_LARGE, GOALS } from './goals.js';
import { CLI, floorProcess, oursProcess, peerProcess, startStandInChild, TIME, type StandInChild, type Target } from './sync-scenarios.js';
import { cpuTimes, percent, ratio, Runs, table, times, unmeasured, type Row } from './sync-table.js';

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

/**
 * The pinned set-up: the stand-in on the last CPU this process may use; the
 * contestants free on every CPU, as a user's process is on a host whose
 * service is remote (BENCH_PIN_CONTESTANTS=1: held to the other CPUs).
 * `why` when it cannot be measured here.
 */
function pinnedSetUp(): { standIn: number; all: number[]; contestants?: number[]; label: string } | { why: string } {
  if (!existsSync(TASKSET)) return { why: `not measured: no ${TASKSET} (util-linux)` };
  const all = affinityOf(process.pid);
  const standIn = all.at(-1);
  if (standIn === undefined || all.length < 2) return { why: `not measured: ${all.length} CPU, none to pin the stand-in apart` };
  const contestants = process.env.BENCH_PIN_CONTESTANTS === '1' ? all.slice(0, -1) : undefined;
  const where = contestants === undefined ? 'contestant free' : `contestant on CPU ${contestants.join(',')}`;
  return { standIn, all, contestants, label: `[stand-in pinned to CPU ${standIn}, ${where}]` };
}
const PINNED = pinnedSetUp();

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
  | 'pinned-ours-first'
  | 'pinned-script-first'
  | 'pinned-ours-resync'
  | 'pinned-floor-0'
  | 'ours-3m-first'
  | 'ours-3m-resync';

const { run, row } = new Runs<Key>();

const FIRST_GOAL = firstOverScriptGoal(USERS);
const FIRST_GOAL_TEXT = `≥ ${FIRST_GOAL.toFixed(1)}× the script (the goal ${USERS >= FIRST_SYNC_LARGE ? 'from' : 'below'} ${FIRST_SYNC_LARGE.toLocaleString('en-US')} users)`;
const RESYNC_GOAL_TEXT = `≥ ${percent(GOALS.resyncShareOfFloor)} of fetch-only`;

async function main(): Promise<void> {
  if (!existsSync(TIME))
    throw new Error(`bench:sync takes each process's peak RSS and CPU time from GNU time (${TIME}, Debian's package 'time')`);
  if (!existsSync(CLI)) throw new Error(`bench:sync runs ${CLI}: npm run build first`);
  const loadBefore = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const cores = await parallelScaling();
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-sync-'));
  const rows: Row[] = [];
  const fmt = (n: number) => n.toLocaleString('en-US');
  process.stderr.write(
    `bench:sync: stand-ins of ${fmt(USERS)}, ${fmt(LATENCY_USERS)} and ${fmt(LINK_USERS)} users (child processes); ours on ${fmt(USERS)}, the script on ${fmt(SCRIPT_USERS)}, the SDK loop on ${fmt(SDK_USERS)}; each a whole process, timed from spawn to exit; ${ROUNDS} round(s); pinned set-up: ${'why' in PINNED ? PINNED.why : PINNED.label}\n`,
  );
  const full = await startStandInChild(USERS);
  const slow = await startStandInChild(LATENCY_USERS);
  const link = await startStandInChild(LINK_USERS, true);
  const on = (s: StandInChild, users: number, held?: readonly number[]): Target => ({ standIn: s.ready, dir, users, cpus: held });
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
      // The pinned set-up: the same stand-in held to one CPU, as a remote service takes none of the host's.
      if (!('why' in PINNED)) {
        const set = PINNED;
        full.pin([set.standIn]);
        const oursPinned = on(full, USERS, set.contestants);
        const scriptPinned = on(full, SCRIPT_USERS, set.contestants);
        const firsts = [
          () => run('pinned-ours-first', 'pinned: ours, first sync', USERS, () => oursProcess(oursPinned, db('pinned-ours'), 4)),
          () =>
            run('pinned-script-first', 'pinned: script, first sync', SCRIPT_USERS, () =>
              peerProcess(scriptPinned, 'script', db('pinned-script')),
            ),
        ];
        if (round % 2 === 0) firsts.reverse();
        for (const first of firsts) await first();
        await run('pinned-ours-resync', 'pinned: ours, re-sync', USERS, () => oursProcess(oursPinned, db('pinned-ours'), 4));
        await run('pinned-floor-0', 'pinned: fetch-only, no added latency', USERS, () => floorProcess(oursPinned, 4, false));
        full.pin(set.all);
      }
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
      for (const name of ['ours', 'script', 'sdk', 'latency', 'link', 'sdk-link', 'pinned-ours', 'pinned-script'])
        for (const ext of ['', '-wal', '-shm', '-journal']) rmSync(db(name) + ext, { force: true });
    }
  } finally {
    await link.close();
    await slow.close();
    await full.close();
  }
  rows.push(...sharedRows(), ...pinnedRows());

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
  }
  const rssGoal = `peak RSS ≤ ${GOALS.maxRssMbAt3M} MB`;
  for (const [key, name] of [
    ['ours-3m-first', 'ours: first sync, 3M users, `sync --once` (concurrency 4)'],
    ['ours-3m-resync', 'ours: re-sync unchanged, 3M users, `sync --once` (concurrency 4)'],
  ] as const) {
    if (BIG === 0) {
      rows.push(unmeasured(`${name}: not measured (BENCH_SYNC_3M=1 not set)`, 3_000_000, rssGoal));
      continue;
    }
    const r = row(key, name);
    r.goal = rssGoal;
    r.met = atMost(r.peakRssMb, GOALS.maxRssMbAt3M);
    rows.push(r);
  }
  rmSync(dir, { recursive: true, force: true });

  const pinned =
    'why' in PINNED
      ? `The pinned set-up: ${PINNED.why}.`
      : `${PINNED.label}: the rows' stand-in held to CPU ${PINNED.standIn} with taskset, as a remote service takes no CPU of the host.`;
  process.stdout.write(
    `\n${table(rows)}\n\nnode ${process.version}, ${cpus().length} CPUs, two busy threads doing ${cores.scaling.toFixed(2)}× the work of one (bench/cores.ts); ${ROUNDS} round(s), median of each (the floor: the fastest run); the stand-ins in processes of their own. wall s: each scenario's whole process from spawn to exit (ours: \`node dist/cli.js sync --once\`, start-up and the WAL checkpoint after the run included), what users/s, the ratios and the goals are on; CPU s: its user + system seconds (GNU time, with the children it waited for; the stand-in's not counted); run s: the work's time inside the process (ours: the engine's run, from its log; the others: their own clock around the work); checkpoint s: ours' checkpoint after the run, inside wall s; peak RSS: GNU time's maximum resident set size. ${pinned} Goals (bench/goals.ts): the first sync's against the script by the user count (${GOALS.firstOverScript.toFixed(1)}× below ${fmt(FIRST_SYNC_LARGE)} users, ${GOALS.firstOverScriptLarge.toFixed(1)}× from there); met: yes or no for what this run measured, - for what it did not.\nload average (1/5/15 min) before: ${loadBefore}, after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}\n`,
  );
}

/** The rows of the set-up where the stand-in shares every CPU with the contestant. */
function sharedRows(): Row[] {
  const ours1 = row('ours-first', 'ours: first sync, `sync --once` (concurrency 4)');
  const script1 = row('script-first', 'competent script: first sync (4 in flight, one transaction)');
  const sdk1 = row('sdk-first', 'SDK loop: first sync (page at a time, transaction per page)');
  ours1.ratio = `${ratio(times(ours1, script1))} the script, ${ratio(times(ours1, sdk1))} the SDK loop; CPU per user ${ratio(cpuTimes(ours1, script1))} the script's`;
  ours1.goal = FIRST_GOAL_TEXT;
  ours1.met = atLeast(times(ours1, script1), FIRST_GOAL);
  const ours2 = row('ours-resync', 'ours: re-sync unchanged, `sync --once` (concurrency 4)');
  const script2 = row('script-resync', 'competent script: re-sync unchanged');
  const sdk2 = row('sdk-resync', 'SDK loop: re-sync unchanged');
  const floor0 = row('floor-0', 'fetch-only floor: no added latency (concurrency 4), bodies discarded');
  ours2.ratio = `${percent(times(ours2, floor0))} of fetch-only; ${ratio(times(ours2, script2))} the script, ${ratio(times(ours2, sdk2))} the SDK loop`;
  ours2.goal = RESYNC_GOAL_TEXT;
  ours2.met = atLeast(times(ours2, floor0), GOALS.resyncShareOfFloor);
  const latency = row('ours-latency', 'ours: first sync, 100 ms latency (concurrency 8)');
  const floor = row('floor', 'fetch-only floor: 100 ms latency (concurrency 8), bodies discarded; the faster of 2 runs', true);
  latency.ratio = `${percent(times(latency, floor))} of fetch-only`;
  latency.goal = `≥ ${percent(GOALS.latencyShareOfFloor)} of fetch-only`;
  latency.met = atLeast(times(latency, floor), GOALS.latencyShareOfFloor);
  const linkOurs = row('ours-link', 'ours: first sync, 50 Mbit/s + 100 ms, compressed (concurrency 8)');
  const linkFloor = row(
    'floor-link',
    'fetch-only floor: 50 Mbit/s + 100 ms, compressed (concurrency 8), bodies discarded; the faster of 2 runs',
    true,
  );
  const linkSdk = row('sdk-link', 'SDK loop: first sync, 50 Mbit/s + 100 ms (fetch asks for compression)');
  linkOurs.ratio = `${percent(times(linkOurs, linkFloor))} of fetch-only; ${ratio(times(linkOurs, linkSdk))} the SDK loop`;
  linkOurs.goal = `≥ ${percent(GOALS.linkShareOfFloor)} of the compressed fetch-only, ≥ ${GOALS.linkOverSdk}× the SDK loop`;
  linkOurs.met = allMet(atLeast(times(linkOurs, linkFloor), GOALS.linkShareOfFloor), atLeast(times(linkOurs, linkSdk), GOALS.linkOverSdk));
  return [ours1, script1, sdk1, ours2, script2, sdk2, floor0, latency, floor, linkOurs, linkFloor, linkSdk];
}

/** The rows of the pinned set-up, or the same rows with no figures and the reason. */
function pinnedRows(): Row[] {
  const names = {
    oursFirst: 'ours: first sync, `sync --once` (concurrency 4)',
    scriptFirst: 'competent script: first sync',
    oursResync: 'ours: re-sync unchanged, `sync --once` (concurrency 4)',
    floor: 'fetch-only floor: no added latency (concurrency 4)',
  };
  if ('why' in PINNED) {
    const label = `[stand-in pinned] ${PINNED.why}:`;
    return [
      unmeasured(`${label} ${names.oursFirst}`, USERS, FIRST_GOAL_TEXT),
      unmeasured(`${label} ${names.scriptFirst}`, SCRIPT_USERS, '-'),
      unmeasured(`${label} ${names.oursResync}`, USERS, RESYNC_GOAL_TEXT),
      unmeasured(`${label} ${names.floor}`, USERS, '-'),
    ];
  }
  const ours1 = row('pinned-ours-first', `${PINNED.label} ${names.oursFirst}`);
  const script1 = row('pinned-script-first', `${PINNED.label} ${names.scriptFirst}`);
  const ours2 = row('pinned-ours-resync', `${PINNED.label} ${names.oursResync}`);
  const floor0 = row('pinned-floor-0', `${PINNED.label} ${names.floor}`);
  ours1.ratio = `${ratio(times(ours1, script1))} the script, CPU per user ${ratio(cpuTimes(ours1, script1))} the script's; ${percent(times(ours1, floor0))} of fetch-only`;
  ours1.goal = FIRST_GOAL_TEXT;
  ours1.met = atLeast(times(ours1, script1), FIRST_GOAL);
  ours2.ratio = `${percent(times(ours2, floor0))} of fetch-only, CPU per user ${ratio(cpuTimes(ours2, floor0))} the floor's`;
  ours2.goal = RESYNC_GOAL_TEXT;
  ours2.met = atLeast(times(ours2, floor0), GOALS.resyncShareOfFloor);
  return [ours1, script1, ours2, floor0];
}

await main();
