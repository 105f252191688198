/**
 * CPU affinity for bench:sync's pinned set-up, through util-linux's
 * `taskset`: on a real host the service is remote, so the stand-in is held
 * to one CPU of its own while the contestant runs on the machine as a user's
 * process would (bench/README.md, bench:sync, "the pinned set-up").
 */
import { spawnSync } from 'node:child_process';

/** util-linux's taskset, where Debian puts it. */
export const TASKSET = '/usr/bin/taskset';

/** A kernel CPU list ("0-3,6,8-9") as CPU numbers, ascending; throws on anything else. */
export function parseCpuList(list: string): number[] {
  const cpus = new Set<number>();
  for (const part of list.trim().split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (m === null) throw new RangeError(`not a CPU list: ${JSON.stringify(list)}`);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (to < from) throw new RangeError(`not a CPU list: ${JSON.stringify(list)}`);
    for (let cpu = from; cpu <= to; cpu++) cpus.add(cpu);
  }
  return [...cpus].sort((a, b) => a - b);
}

function taskset(args: readonly string[]): string {
  const r = spawnSync(TASKSET, args, { encoding: 'utf8' });
  if (r.error !== undefined) throw r.error;
  if (r.status !== 0) throw new Error(`taskset ${args.join(' ')}: exited ${r.status}: ${r.stderr.trim()}`);
  return r.stdout;
}

/** The CPUs a process may run on ("pid 7's current affinity list: 0,1"). */
export function affinityOf(pid: number): number[] {
  const out = taskset(['-p', '-c', String(pid)]);
  const list = out.slice(out.lastIndexOf(':') + 1);
  return parseCpuList(list);
}

/** Holds every thread of process `pid` to `cpus` (threads it starts later inherit it). */
export function pin(pid: number, cpus: readonly number[]): void {
  taskset(['-a', '-p', '-c', cpus.join(','), String(pid)]);
}
