/**
 * The sinks' series on /metrics (src/sinks): per sink, how far behind the
 * feed it is (events, seconds), what it holds while its destination fails,
 * whether it fails, and how many events it delivered. Read from the
 * runners' state on scrape (webhook sinks: their queues' state as the last dispatch read it): no round trip to a destination.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Sinks } from '../sinks/start.js';
import type { SinkLag, SinkState } from '../sinks/sink-loop.js';

type Row = SinkState & SinkLag;

export function registerSinkGauges(registry: Registry, sinks: Pick<Sinks, 'report'>): (sink: string, kind: string, n: number) => void {
  const labelNames = ['sink', 'kind'] as const;
  // One report a scrape for the four gauges (each reads the feed's lag).
  let cached: { at: number; rows: Row[] } | undefined;
  const rows = (): Row[] => {
    const now = Date.now();
    if (cached === undefined || now - cached.at > 1_000) cached = { at: now, rows: sinks.report(new Date(now)) };
    return cached.rows;
  };
  const gauge = (name: string, help: string, pick: (r: Row) => number): void => {
    const g: Gauge<(typeof labelNames)[number]> = new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        g.reset();
        for (const r of rows()) g.set({ sink: r.name, kind: r.kind }, pick(r));
      },
    });
  };
  gauge(
    'user_mirror_sink_events_behind',
    'Change events the sink has not yet taken (delivered, or passed by its filter).',
    (r) => r.eventsBehind,
  );
  gauge(
    'user_mirror_sink_seconds_behind',
    'Age of the oldest change event the sink has not yet taken; 0 when caught up.',
    (r) => r.secondsBehind,
  );
  gauge(
    'user_mirror_sink_held_events',
    'Change events held because the sink cannot deliver (its destination down or refusing, or the sink stopped); 0 while it delivers.',
    (r) => (r.failing !== null || r.stopped !== null ? r.eventsBehind : 0),
  );
  gauge(
    'user_mirror_sink_failing',
    'Whether the sink cannot deliver: 1 while its destination is down or refuses, or the sink stopped (behind retention, another feed); status exits 1.',
    (r) => (r.failing !== null || r.stopped !== null ? 1 : 0),
  );
  const delivered = new Counter({
    name: 'user_mirror_sink_delivered_total',
    help: 'Change events the sink appended to its destination.',
    labelNames,
    registers: [registry],
  });
  return (sink, kind, n) => delivered.inc({ sink, kind }, n);
}
