/**
 * The sinks of SINKS_FILE, started: one runner (./runner.ts) per sink, each
 * with the destination of its kind, reading the daemon's feed. Webhook sinks
 * are not among them: they are delivered through their BullMQ queues once
 * the queues' Redis answers (src/daemon/change-delivery.ts).
 */
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../db/change-feed.js';
import type { Destination } from './contract.js';
import { JetStreamDestination } from './jetstream.js';
import { RedisStreamDestination } from './redis-stream.js';
import { SinkRunner, type SinkLag, type SinkState } from './runner.js';
import type { SinkSettings, WebhookSink } from './sinks-file.js';

/** The destination of a sink's kind; `probe` opens a connection that does not wait out an outage (status). */
export function destinationOf(sink: DestinationSink, log: Logger | undefined, probe = false): Destination {
  if (sink.kind === 'redis_stream') return new RedisStreamDestination(sink, log, probe ? 'probe' : 'control');
  return new JetStreamDestination(sink);
}

/** The kinds a runner drives; webhook sinks go through their BullMQ queues (src/daemon/change-delivery.ts). */
export type DestinationSink = Exclude<SinkSettings, WebhookSink>;

export function isDestinationSink(sink: SinkSettings): sink is DestinationSink {
  return sink.kind !== 'webhook';
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

export function startSinks(
  feed: ChangeFeed,
  sinks: readonly SinkSettings[],
  log: Logger,
  onDelivered: (sink: string, kind: string, n: number) => void = () => undefined,
): Sinks {
  const runners = sinks
    .filter(isDestinationSink)
    .map((s) => new SinkRunner(feed, s, destinationOf(s, log), log, (n) => onDelivered(s.name, s.kind, n)));
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
