/**
 * Retries a SQLite write that found its file's write lock taken
 * (SQLITE_BUSY after the connection's busy_timeout), with backoff, without
 * blocking: better-sqlite3's own wait is synchronous and holds the event
 * loop, these waits are timers. Bounded by a total budget; after it the last
 * error is the caller's to handle.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface BusyRetryOptions {
  /** Total time to keep trying. */
  budgetMs?: number;
  firstDelayMs?: number;
  maxDelayMs?: number;
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown }) => void;
}

/** Long enough to outlast any lock a writer of the audit file is expected to hold, and then some. */
const DEFAULT_BUSY_BUDGET_MS = 120_000;

export function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** Pure: the wait before retry `attempt` (1-based): doubling, capped, never past the deadline. */
export function busyRetryDelay(attempt: number, first: number, max: number, msLeft: number): number {
  return Math.max(0, Math.min(first * 2 ** (attempt - 1), max, msLeft));
}

export async function retryWhileBusy<T>(write: () => Promise<T>, options: BusyRetryOptions = {}): Promise<T> {
  const budget = options.budgetMs ?? DEFAULT_BUSY_BUDGET_MS;
  const first = options.firstDelayMs ?? 50;
  const max = options.maxDelayMs ?? 2_000;
  const deadline = Date.now() + budget;
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      const left = deadline - Date.now();
      if (!isBusy(error) || left <= 0) throw error;
      const delayMs = busyRetryDelay(attempt, first, max, left);
      options.onRetry?.({ attempt, delayMs, error });
      await sleep(delayMs);
    }
  }
}
