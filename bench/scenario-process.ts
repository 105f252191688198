/**
 * The little that bench:sync's peer and floor processes share
 * (bench/peer-script.ts, bench/peer-sdk.ts, bench/fetch-only.ts): each is a
 * script started on its own by bench/sync.ts, as a user starts theirs, with
 * its settings as one JSON argument; it prints one JSON line on stdout as it
 * ends, what it did and how long its work took inside the process, and ends
 * as a script does, when nothing is left to do. bench/sync.ts times the
 * process from spawn to exit; the in-process figure is only shown beside it.
 */

/** The settings bench/sync.ts passes as the process's one argument. */
export function scenarioRequest<T>(): T {
  return JSON.parse(process.argv[2] ?? '{}') as T;
}

/** The line a scenario process prints last: its work's time inside the process and what the work reported. */
export type ScenarioReport<T extends object = object> = T & { runSeconds: number };

/** Runs `work`, timing it, and prints its ScenarioReport. */
export async function reportRun<T extends object>(work: () => Promise<T>): Promise<void> {
  const started = performance.now();
  const result = await work();
  const report: ScenarioReport<T> = { ...result, runSeconds: (performance.now() - started) / 1000 };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}
