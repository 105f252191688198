/**
 * bench:sync's table: each scenario's runs over the rounds as one row
 * (medians; a floor's fastest run), the ratios between rows, and the
 * markdown it prints. The goals and `met` are bench/goals.ts's.
 */
import { metCell, type Met } from './goals.js';
import type { RunResult } from './sync-scenarios.js';

/** One row of the table; a scenario the run did not measure has no figures (`-`). */
export interface Row {
  scenario: string;
  users: number;
  wallSeconds?: number;
  /** User + system CPU seconds of the scenario's process (GNU time), beside wall. */
  cpuSeconds?: number;
  runSeconds?: number;
  checkpointSeconds?: number;
  /** Users per second of whole-process time. */
  rate?: number;
  peakRssMb?: number;
  ratio: string;
  goal: string;
  met: Met;
}

const median = (xs: readonly number[]): number | undefined => {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid] : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};

/** One scenario over its rounds: the median of each figure (`fastest`: the run fastest by wall time), the highest peak RSS. */
function row(users: number, results: readonly RunResult[], scenario: string, fastest = false): Row {
  if (results.length === 0) throw new Error(`no runs of ${scenario}`);
  const counted = fastest ? [results.reduce((a, b) => (b.wallSeconds < a.wallSeconds ? b : a))] : results;
  const figures = (pick: (r: RunResult) => number | undefined) => median(counted.flatMap((r) => pick(r) ?? []));
  const wallSeconds = figures((r) => r.wallSeconds) as number;
  return {
    scenario,
    users,
    wallSeconds,
    cpuSeconds: figures((r) => r.cpuSeconds),
    runSeconds: figures((r) => r.runSeconds),
    checkpointSeconds: figures((r) => r.checkpointSeconds),
    rate: users / wallSeconds,
    peakRssMb: Math.max(...results.map((r) => r.peakRssMb)),
    ratio: '',
    goal: '-',
    met: undefined,
  };
}

/** Every scenario's runs over the rounds, by key. */
export class Runs<K extends string> {
  readonly #byKey = new Map<K, { users: number; results: RunResult[] }>();

  /** Runs one scenario process, prints its figures on stderr as it ends and keeps them. */
  readonly run = async (key: K, what: string, users: number, scenario: () => Promise<RunResult>): Promise<void> => {
    const r = await scenario();
    const inside = [
      r.runSeconds === undefined ? undefined : `run ${r.runSeconds.toFixed(2)} s`,
      r.checkpointSeconds === undefined ? undefined : `checkpoint ${r.checkpointSeconds.toFixed(2)} s`,
    ].filter((s) => s !== undefined);
    process.stderr.write(
      `bench:sync:   ${what}: ${users} users in ${r.wallSeconds.toFixed(2)} s wall, ${r.cpuSeconds.toFixed(2)} s CPU${inside.length > 0 ? ` (${inside.join(', ')})` : ''}, ${Math.round(users / r.wallSeconds)} users/s, peak RSS ${Math.round(r.peakRssMb)} MB\n`,
    );
    const entry = this.#byKey.get(key) ?? { users, results: [] };
    entry.results.push(r);
    this.#byKey.set(key, entry);
  };

  /** The row of scenario `key`'s runs. */
  readonly row = (key: K, scenario: string, fastest = false): Row => {
    const e = this.#byKey.get(key);
    if (e === undefined) throw new Error(`no runs of ${key}`);
    return row(e.users, e.results, scenario, fastest);
  };
}

/** A scenario the run did not measure, and why, in the scenario's cell. */
export function unmeasured(scenario: string, users: number, goal: string): Row {
  return { scenario, users, ratio: '', goal, met: undefined };
}

/** How many times `peer`'s rate ours ran at (wall); undefined if either was not measured. */
export function times(ours: Row, peer: Row): number | undefined {
  return ours.rate === undefined || peer.rate === undefined ? undefined : ours.rate / peer.rate;
}

/** Ours' CPU seconds per user against `peer`'s. */
export function cpuTimes(ours: Row, peer: Row): number | undefined {
  if (ours.cpuSeconds === undefined || peer.cpuSeconds === undefined) return undefined;
  return ours.cpuSeconds / ours.users / (peer.cpuSeconds / peer.users);
}

export const percent = (share: number | undefined): string => (share === undefined ? '-' : `${(share * 100).toFixed(0)}%`);
export const ratio = (x: number | undefined): string => (x === undefined ? '-' : `${x.toFixed(2)}×`);

export function table(rows: readonly Row[]): string {
  const fmt = (n: number | undefined) => (n === undefined ? '-' : Math.round(n).toLocaleString('en-US'));
  const s = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(2));
  const head =
    '| scenario | users | wall s | CPU s | run s | checkpoint s | users/s | peak RSS MB | ours vs peer | goal | met |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.scenario} | ${fmt(r.users)} | ${s(r.wallSeconds)} | ${s(r.cpuSeconds)} | ${s(r.runSeconds)} | ${s(r.checkpointSeconds)} | ${fmt(r.rate)} | ${fmt(r.peakRssMb)} | ${r.ratio || '-'} | ${r.goal} | ${metCell(r.met)} |`,
  );
  return [head, ...body].join('\n');
}
