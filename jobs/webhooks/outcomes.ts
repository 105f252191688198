/**
 * What became of each delivery attempt, told to the caller (metrics) and to
 * the log. Kept out of the worker because how outcomes are counted and
 * summed up has nothing to do with how an event is delivered.
 */
import { logError } from '../../src/runtime/log-error.js';
import type { WebhookTarget } from './contract.js';
import type { Logger } from 'pino';

export interface WebhookOutcome {
  outcome: 'delivered' | 'retrying' | 'failed';
  eventId: string | undefined;
  cursor: number | undefined;
  /** The receiver's status, when it answered. */
  status?: number;
  attempt: number;
  /** Before the next attempt (`retrying`). */
  delayMs?: number;
  /** The request's duration. */
  ms: number;
}

/** How often the worker logs its delivery summary. */
const SUMMARY_EVERY_MS = 60_000;

export interface OutcomeReport {
  /** Counts one attempt's outcome and hands it to `onOutcome`; a callback that throws is logged, never the delivery's failure. */
  report(outcome: WebhookOutcome): void;
  /** Logs the count since the last summary, if any attempt was made, and starts counting afresh. */
  summarize(): void;
  /** Stops the summary each minute (the caller summarizes once more when it has closed). */
  stop(): void;
}

/**
 * One info line a minute (and at close) counting what happened, instead of
 * one per delivered event: ~1 MB of log a minute under steady churn was
 * mostly those lines. Each delivery is still a debug line; refusals,
 * retries and endpoint failures stay warn or error lines of their own.
 */
export function outcomeReport(logger: Logger, target: WebhookTarget, onOutcome?: (outcome: WebhookOutcome) => void): OutcomeReport {
  const tally: Record<WebhookOutcome['outcome'], number> = { delivered: 0, retrying: 0, failed: 0 };
  const summarize = (): void => {
    if (tally.delivered + tally.retrying + tally.failed === 0) return;
    logger.info(
      { event: 'webhook.summary', target: target.id, ...tally, periodMs: SUMMARY_EVERY_MS },
      `webhooks: ${tally.delivered} delivered`,
    );
    tally.delivered = tally.retrying = tally.failed = 0;
  };
  const summaryTimer = setInterval(summarize, SUMMARY_EVERY_MS);
  summaryTimer.unref();

  return {
    report(outcome) {
      tally[outcome.outcome]++;
      try {
        onOutcome?.(outcome);
      } catch (err) {
        logError(logger, 'error', { err }, 'webhook outcome callback threw');
      }
    },
    summarize,
    stop() {
      clearInterval(summaryTimer);
    },
  };
}
