/**
 * The sinks of SINKS_FILE, started: one runner per sink reading the
 * daemon's feed: ./runner.ts with the destination of its kind for the
 * event logs (Redis Streams, JetStream), ./postgres/runner.ts for a
 * PostgreSQL replica of the mirror, which reads the mirror file itself
 * for its baselines. Webhook sinks are not among them: they are delivered
 * through their BullMQ queues once the queues' Redis answers
 * (src/daemon/change-delivery.ts).
 */
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../db/change-feed.js';
import type { Destination } from './contract.js';
import { JetStreamDestination } from './jetstream.js';
import { PostgresPositionProbe, PostgresSinkRunner } from './postgres/runner.js';
import { RedisStreamDestination } from './redis-stream.js';
import { SinkRunner } from './runner.js';
import type { SinkLag, SinkState } from './sink-loop.js';
import type { PostgresSink, SinkSettings, WebhookSink } from './sinks-file.js';

/** A sink that appends events to a log of its own kind (Redis Streams, JetStream), which holds its position by id. */
export type EventLogSink = Exclude<SinkSettings, PostgresSink | WebhookSink>;

/** The sinks a runner of this file drives; webhook sinks go through their BullMQ queues (src/daemon/change-delivery.ts). */
export type RunnerSink = Exclude<SinkSettings, WebhookSink>;

function isRunnerSink(sink: SinkSettings): sink is RunnerSink {
  return sink.kind !== 'webhook';
}

export function isEventLogSink(sink: SinkSettings): sink is EventLogSink {
  return sink.kind === 'redis_stream' || sink.kind === 'jetstream';
}

/** The destination of a sink's kind; `probe` opens a connection that does not wait out an outage (status). */
export function destinationOf(sink: EventLogSink, log: Logger | undefined, probe = false): Destination {
  if (sink.kind === 'redis_stream') return new RedisStreamDestination(sink, log, probe ? 'probe' : 'control');
  return new JetStreamDestination(sink);
}

/** What `status` asks a destination: where it is and the position it holds. */
export type PositionProbe = Pick<Destination, 'where' | 'open' | 'position' | 'close'>;

export function positionProbeOf(sink: RunnerSink): PositionProbe {
  return sink.kind === 'postgres' ? new PostgresPositionProbe(sink) : destinationOf(sink, undefined, true);
}

export interface Sinks {
  /** Each sink's state and lag, for status, /metrics and /readyz. */
  report: (now: Date) => Array<SinkState & SinkLag>;
  /** Delivers what is pending now (after a sync published). */
  nudge: () => void;
  /** The highest cursor retention may drop: what every sink's destination holds (Infinity without sinks). */
  hold: () => number;
  close: () => Promise<void>;
}

/** Where the mirror file is, for the sinks that read it beyond the feed (a PostgreSQL baseline); unset for an in-memory mirror. */
export interface SinksContext {
  mirrorPath?: string | undefined;
}

export function startSinks(
  feed: ChangeFeed,
  sinks: readonly SinkSettings[],
  log: Logger,
  onDelivered: (sink: string, kind: string, n: number) => void = () => undefined,
  context: SinksContext = {},
): Sinks {
  const runners = sinks.filter(isRunnerSink).map((s) => {
    const counted = (n: number) => onDelivered(s.name, s.kind, n);
    if (s.kind !== 'postgres') return new SinkRunner(feed, s, destinationOf(s, log), log, counted);
    const { mirrorPath } = context;
    if (mirrorPath === undefined || mirrorPath === ':memory:')
      throw new Error(`sink ${s.name}: a postgres sink loads its baseline from the mirror file; MIRROR_DB is in memory`);
    return new PostgresSinkRunner(feed, mirrorPath, s, log, counted);
  });
  for (const r of runners) r.start();
  return {
    report: (now) => runners.map((r) => ({ ...r.state(), ...r.lag(now) })),
    nudge: () => {
      for (const r of runners) void r.pass();
    },
    hold: () => runners.reduce((min, r) => Math.min(min, r.hold()), Infinity),
    close: async () => {
      await Promise.all(runners.map((r) => r.close()));
    },
  };
}
