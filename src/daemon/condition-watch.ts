import type { Logger } from 'pino';
/**
 * Conditions the daemon watches between syncs and logs once each: when one
 * begins (at warn, with why) and when it ends (at info), never on every
 * look or every scrape, so a lasting problem is one line an operator can
 * alert on, not a flood. `status` and /metrics say the same the whole time
 * (src/health/status-findings.ts, ./scrape-gauges.ts).
 *
 * Watched: the removal audit cannot be written (`audit.unwritable`), and
 * webhook delivery behind WEBHOOK_LAG_WARN_SECONDS (`webhooks.lagging`).
 * A sync's own findings (rejected records, identity conflicts) are logged
 * by the sync itself, once per run (src/sync/run-log.ts).
 */

export interface WatchedCondition {
  /** The log event when it begins; `<event>_cleared` when it ends. */
  event: string;
  /** Why the condition holds now, or undefined when it does not; a throw is "unknown": nothing logged. */
  check: () => Promise<string | undefined> | string | undefined;
}

/** How often the daemon looks: often enough for a log line within a scrape interval, rarely enough to cost nothing. */
const WATCH_INTERVAL_MS = 10_000;

export interface ConditionWatch {
  /** Looks once now (tests; the timer does it every intervalMs). */
  look(): Promise<void>;
  stop(): void;
}

export function startConditionWatch(log: Logger, conditions: readonly WatchedCondition[], intervalMs = WATCH_INTERVAL_MS): ConditionWatch {
  const holding = new Map<string, boolean>();
  let looking: Promise<void> | undefined;
  const lookAt = async (c: WatchedCondition): Promise<void> => {
    let problem: string | undefined;
    try {
      problem = await c.check();
    } catch {
      // Unknown (Redis away, the mirror busy): the state stands until a look can tell; the outage is logged where it happens.
      return;
    }
    const held = holding.get(c.event) ?? false;
    if (problem !== undefined && !held) log.warn({ event: c.event, problem }, problem);
    if (problem === undefined && held) log.info({ event: `${c.event}_cleared` }, `${c.event}: no longer`);
    holding.set(c.event, problem !== undefined);
  };
  const look = (): Promise<void> => {
    looking ??= Promise.all(conditions.map(lookAt))
      .then(() => undefined)
      .finally(() => (looking = undefined));
    return looking;
  };
  const timer = setInterval(() => void look(), intervalMs);
  timer.unref();
  void look();
  return { look, stop: () => clearInterval(timer) };
}
