/**
 * Lets the first of a run of identical events through, then at most one per
 * interval, with a count of what was held back. While Redis is down every
 * connection reports every reconnect attempt; a months-long daemon must not
 * fill its disk with the same line.
 */
export interface ThrottleVerdict {
  log: boolean;
  /** Events with this key held back since the last one let through. */
  suppressed: number;
}

export class RepeatThrottle {
  private readonly seen = new Map<string, { lastLoggedAt: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  hit(key: string): ThrottleVerdict {
    const t = this.now();
    const entry = this.seen.get(key);
    if (entry === undefined || t - entry.lastLoggedAt >= this.intervalMs) {
      const suppressed = entry?.suppressed ?? 0;
      this.seen.set(key, { lastLoggedAt: t, suppressed: 0 });
      return { log: true, suppressed };
    }
    entry.suppressed++;
    return { log: false, suppressed: entry.suppressed };
  }
}
