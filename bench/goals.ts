/**
 * The speed goals bench:sync and bench:replica print with a `met` column
 * (bench/README.md, "Goals"), and the one rule that says whether a run met
 * one. Pure, so test/bench-goals.unit.test.ts holds the rule to what the
 * README promises: `yes` or `no` for what the run measured, `-` for what it
 * did not.
 */

/** Every goal, on whole-process wall time unless it says otherwise. */
export const GOALS = {
  /** A re-sync of unchanged users against the fetch-only floor's rate, at 100,000 users and at 1,000,000 alike. */
  resyncShareOfFloor: 0.8,
  /** A first sync against the competent script: below FIRST_SYNC_LARGE users. */
  firstOverScript: 1.0,
  /** A first sync against the competent script: from FIRST_SYNC_LARGE users on, where the script's upserts outgrow the cache. */
  firstOverScriptLarge: 1.5,
  /** A first sync at 100 ms a request against its fetch-only floor. */
  latencyShareOfFloor: 0.85,
  /** A first sync behind a 50 Mbit/s link and 100 ms against the compressed fetch-only floor. */
  linkShareOfFloor: 0.85,
  /** The same against the SDK loop on the same link. */
  linkOverSdk: 5,
  /** Peak RSS of a first sync and a re-sync of 3,000,000 users, in MB. */
  maxRssMbAt3M: 200,
  /** bench:replica: the server's CPU per resolve against a bare node:http server's per answer, at most. */
  replicaCpuOverBare: 1.5,
} as const;

/** The user count from which a first sync is held to GOALS.firstOverScriptLarge. */
export const FIRST_SYNC_LARGE = 1_000_000;

/** The first sync's goal against the script for a run over `users` users. */
export function firstOverScriptGoal(users: number): number {
  return users >= FIRST_SYNC_LARGE ? GOALS.firstOverScriptLarge : GOALS.firstOverScript;
}

/** Whether a goal was met: undefined when the run did not measure it. */
export type Met = boolean | undefined;

/** `measured` ≥ `goal`; undefined when not measured (or not a number). */
export function atLeast(measured: number | undefined, goal: number): Met {
  return measured === undefined || Number.isNaN(measured) ? undefined : measured >= goal;
}

/** `measured` ≤ `goal`; undefined when not measured (or not a number). */
export function atMost(measured: number | undefined, goal: number): Met {
  return measured === undefined || Number.isNaN(measured) ? undefined : measured <= goal;
}

/** A goal of several parts: missed when one part is missed, unknown when a part was not measured, else met. */
export function allMet(...parts: readonly Met[]): Met {
  if (parts.includes(false)) return false;
  return parts.includes(undefined) ? undefined : true;
}

/** The `met` column's cell. */
export function metCell(met: Met): string {
  return met === undefined ? '-' : met ? 'yes' : 'no';
}
