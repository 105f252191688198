/**
 * One pass of the PostgreSQL sink: bring the destination up to the mirror's
 * feed, then return. What the pass decides (./replicate-decisions.ts is the
 * pure part) and does:
 *
 * - no baseline yet, another feed epoch (the mirror was restored or
 *   rebuilt), another field policy, a cursor the feed no longer holds
 *   (retention, a restore), or a `mirror.baseline` / `mirror.restored`
 *   event next: **rebaseline** from one read snapshot of the mirror. A
 *   restore is never "continued": the destination held what the replaced
 *   file published, which the restored mirror does not hold.
 * - else: apply the feed after the position in batches of `batchEvents`,
 *   each batch in one transaction with its position, until the feed's end.
 */
import { openFeedReader, openMirrorSnapshot } from '../../../db/sink-snapshot.js';
import type { BaselineCounts, DestinationPosition, PostgresDestination } from './destination.js';
import { nextStep } from './replicate-decisions.js';

export interface ReplicateOptions {
  mirrorPath: string;
  destination: PostgresDestination;
  /** The field policy's id (`name:fingerprint`): rows written under another are loaded again. */
  policyId: string;
  batchEvents: number;
  /** The schema was prepared on this connection already (the daemon's runner prepares once per connection). */
  prepared?: boolean;
  /** Asked between steps: true ends the pass after the step committed (the daemon shutting down). */
  stop?: () => boolean;
  /** Called after each committed step (logs, metrics, tests). */
  onStep?: (step: ReplicateStep) => void;
}

export type ReplicateStep =
  | { kind: 'baseline'; why: string; cursor: number; counts: BaselineCounts; ms: number }
  | { kind: 'batch'; from: number; to: number; events: number; ms: number };

export interface ReplicateResult {
  baselines: number;
  batches: number;
  events: number;
  position: DestinationPosition | undefined;
}

export async function replicateOnce(o: ReplicateOptions): Promise<ReplicateResult> {
  const { destination } = o;
  if (o.prepared !== true) await destination.ensureSchema();
  const result: ReplicateResult = { baselines: 0, batches: 0, events: 0, position: undefined };
  for (;;) {
    const position = await destination.readPosition();
    if (o.stop?.() === true) {
      result.position = position;
      return result;
    }
    const feed = openFeedReader(o.mirrorPath);
    let step;
    let page;
    let now;
    try {
      now = feed.position();
      page = position === undefined ? undefined : feed.page(position.cursor, o.batchEvents);
      step = nextStep(position, now, o.policyId, page);
    } finally {
      feed.close();
    }
    if (step.kind === 'done') {
      result.position = position;
      return result;
    }
    const started = Date.now();
    if (step.kind === 'baseline') {
      const snapshot = openMirrorSnapshot(o.mirrorPath);
      try {
        const counts = await destination.baseline(snapshot);
        result.baselines++;
        o.onStep?.({ kind: 'baseline', why: step.why, cursor: snapshot.position.cursor, counts, ms: Date.now() - started });
      } finally {
        snapshot.close();
      }
      continue;
    }
    const from = step.after.cursor;
    const applied = await destination.applyBatch(step.events, step.after, { ...now, cursor: step.to });
    result.batches++;
    result.events += step.events.length;
    o.onStep?.({ kind: 'batch', from, to: step.to, events: applied, ms: Date.now() - started });
  }
}
