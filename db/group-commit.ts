/**
 * Group commit for small SQLite writes issued by many concurrent tasks.
 *
 * A commit costs far more than the statement it commits (a WAL append and
 * its bookkeeping): at a thousand removals a second, one transaction per
 * audit write is most of a worker's CPU. Here writes submitted within
 * `windowMs` of the first pending one run in a single transaction, and each
 * submitter's promise resolves only once its write is committed, so a
 * caller that awaits still knows its row is durable before it goes on. The
 * window is the latency a write may gain; it is a few milliseconds against
 * an HTTP round trip.
 *
 * If a batch fails, its writes are retried one by one, so a single bad write
 * rejects only its own promise; unless it failed because the file was busy,
 * which would fail each of them again, one busy timeout after another: then
 * every write of the batch is rejected with that error, for the caller to
 * retry later (see busy-retry.ts).
 */
import { isBusy } from './busy-retry.js';

export type TransactionRunner = (body: () => void) => void;

export interface GroupCommit {
  submit(write: () => void): Promise<void>;
  /** Commits whatever is pending now (shutdown). */
  flush(): void;
}

interface Pending {
  write: () => void;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export function createGroupCommit(transaction: TransactionRunner, options: { maxBatch?: number; windowMs?: number } = {}): GroupCommit {
  const maxBatch = options.maxBatch ?? 500;
  const windowMs = options.windowMs ?? 3;
  let pending: Pending[] = [];
  let scheduled: NodeJS.Timeout | undefined;

  const flush = (): void => {
    if (scheduled !== undefined) clearTimeout(scheduled);
    scheduled = undefined;
    while (pending.length > 0) {
      const batch = pending.slice(0, maxBatch);
      pending = pending.slice(batch.length);
      try {
        transaction(() => {
          for (const p of batch) p.write();
        });
        for (const p of batch) p.resolve();
      } catch (err) {
        if (isBusy(err)) {
          for (const p of batch) p.reject(err);
          continue;
        }
        for (const p of batch) {
          try {
            transaction(p.write);
            p.resolve();
          } catch (err) {
            p.reject(err);
          }
        }
      }
    }
  };

  return {
    submit(write) {
      return new Promise<void>((resolve, reject) => {
        pending.push({ write, resolve, reject });
        if (pending.length >= maxBatch) flush();
        else scheduled ??= setTimeout(flush, windowMs);
      });
    },
    flush,
  };
}
