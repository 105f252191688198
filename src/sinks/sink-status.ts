/**
 * What `status` (and `user-mirror sinks`) says of each sink, read without
 * the daemon: the destination asked for its position (a probe: one
 * connection attempt, within a budget), the feed for what the sink's filter
 * has pending after it. A destination that does not answer or refuses, a
 * sink behind the feed's retention, or one further behind than
 * WEBHOOK_LAG_WARN_SECONDS (the one lag threshold of the feed's deliveries)
 * needs the operator: status exits 1 and names it. A PostgreSQL sink
 * (./postgres) says the position its `sink_position` row holds.
 */
import type { ChangeFeed } from '../../db/change-feed.js';
import { pendingAfter } from './runner.js';
import type { SinkSettings } from './sinks-file.js';
import { positionProbeOf } from './start.js';

export interface SinkStatus {
  name: string;
  kind: string;
  where: string;
  policy: string;
  /** The cursor of the last event the destination holds (0: none yet); null when it could not be read. */
  position: number | null;
  /** Events the sink's filter admits after its position (a lower bound when `more`). */
  eventsBehind: number | null;
  secondsBehind: number | null;
  /** Why the sink needs the operator: unreachable, refusing, behind retention, lagging; null when all is well. */
  problem: string | null;
}

const PROBE_BUDGET_MS = 5_000;

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function readSinkStatus(
  feed: ChangeFeed | undefined,
  sink: SinkSettings,
  lagWarnSeconds: number,
  now: Date,
): Promise<SinkStatus> {
  const destination = positionProbeOf(sink);
  const base = { name: sink.name, kind: sink.kind, where: destination.where, policy: sink.policy.id };
  let position: number;
  try {
    const pos = await within(
      destination.open().then(() => destination.position()),
      PROBE_BUDGET_MS,
      destination.where,
    );
    position = pos?.cursor ?? 0;
  } catch (err) {
    return { ...base, position: null, eventsBehind: null, secondsBehind: null, problem: `destination failing: ${(err as Error).message}` };
  } finally {
    await destination.close().catch(() => undefined);
  }
  if (feed === undefined) return { ...base, position, eventsBehind: null, secondsBehind: null, problem: null };
  const pending = pendingAfter(feed, sink.filter, position);
  const secondsBehind = pending.firstAt === undefined ? 0 : Math.max(0, Math.round((now.getTime() - Date.parse(pending.firstAt)) / 1000));
  let problem: string | null = null;
  // A postgres sink loads a new baseline rather than stop: its lag says how it goes.
  if (pending.gone && sink.kind !== 'postgres')
    problem = `behind the feed's retention: events after cursor ${position} were dropped before this sink took them`;
  else if (secondsBehind > lagWarnSeconds)
    problem = `lagging: ${secondsBehind}s behind, above WEBHOOK_LAG_WARN_SECONDS (${lagWarnSeconds}s)`;
  return { ...base, position, eventsBehind: pending.events, secondsBehind, problem };
}

/** One line a sink, as `status` prints it. */
export function formatSinkStatus(s: SinkStatus): string {
  const head = `sink ${s.name} (${s.kind}, ${s.where}, policy ${s.policy})`;
  const at = s.position === null ? 'position unknown' : `at cursor ${s.position}`;
  const lag = s.eventsBehind === null ? '' : `, ${s.eventsBehind} events behind (${s.secondsBehind ?? 0}s)`;
  return `${head}: ${at}${lag}${s.problem === null ? '' : ` - FAILING: ${s.problem}`}`;
}
