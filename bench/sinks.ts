/**
 * `npm run bench:sinks`: events/s each sink kind delivers at BENCH_SINK_EVENTS
 * events (default 100,000, ~1 KB records, the feed a real mirror file),
 * beside a bare client loop doing the same appends in the same run:
 * pipelined XADD of the same entries (500 a round trip, as the sink's
 * batch), and js.publish with acks (500 in flight, as the sink). Then the
 * delivery lag under steady churn: events published at BENCH_SINK_RATE/s
 * for 10 s, each one's time from publish to its destination's position.
 * Own redis-server (AOF everysec, as production requires) and nats-server
 * -js on free ports. Goals: each sink >= 70% of its bare loop; lag <= 1 s.
 */
import { performance } from 'node:perf_hooks';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Redis } from 'ioredis';
import { silentLogger } from '../src/runtime/log.js';
import { SinkRunner } from '../src/sinks/runner.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { destinationOf, isEventLogSink, type EventLogSink } from '../src/sinks/start.js';
import { startTestRedis } from '../test/support/redis-server.js';
import { startTestNats } from '../test/support/nats-server.js';
import { createFeedRig, type FeedRig } from '../test/support/sink-rig.js';

const EVENTS = Number(process.env.BENCH_SINK_EVENTS ?? 100_000);
const RATE = Number(process.env.BENCH_SINK_RATE ?? 2_000);
const BATCH = 500;

interface Row {
  kind: string;
  bare: number;
  sink: number;
  lagP50: number;
  lagMax: number;
}

function allEvents(rig: FeedRig) {
  const page = rig.feed.page(0, EVENTS + 1);
  if (page.gone) throw new Error('feed gone');
  return page.events;
}

/** The sink from the feed's start to its end: events/s. */
async function timeSink(rig: FeedRig, sink: EventLogSink): Promise<number> {
  const runner = new SinkRunner(rig.feed, sink, destinationOf(sink, silentLogger), silentLogger);
  const t0 = performance.now();
  await runner.pass();
  const s = (performance.now() - t0) / 1000;
  const state = runner.state();
  await runner.close();
  if (state.position !== EVENTS || state.failing !== null)
    throw new Error(`${sink.name}: stopped at ${state.position ?? 'none'}: ${state.failing?.last ?? ''}`);
  return EVENTS / s;
}

/** Publishes at RATE/s for 10 s while the sink runs; each event's seconds from publish to delivered. */
async function lagUnderChurn(rig: FeedRig, sink: EventLogSink): Promise<{ p50: number; max: number }> {
  const runner = new SinkRunner(rig.feed, sink, destinationOf(sink, silentLogger), silentLogger);
  runner.start();
  await waitFor(() => runner.state().position === rig.feed.bounds().latest);
  const published: Array<{ cursor: number; at: number }> = [];
  const lags: number[] = [];
  const perTick = Math.max(1, Math.round(RATE / 20));
  const end = performance.now() + 10_000;
  while (performance.now() < end) {
    const cursors = rig.publish(perTick);
    const at = performance.now();
    for (const cursor of cursors) published.push({ cursor, at });
    await new Promise((r) => setTimeout(r, 50));
    const pos = runner.state().position ?? 0;
    while (published.length > 0 && (published[0]?.cursor ?? Infinity) <= pos)
      lags.push((performance.now() - (published.shift()?.at ?? 0)) / 1000);
  }
  await waitFor(() => runner.state().position === rig.feed.bounds().latest);
  const now = performance.now();
  for (const p of published) lags.push((now - p.at) / 1000);
  await runner.close();
  lags.sort((a, b) => a - b);
  return { p50: lags[Math.floor(lags.length / 2)] ?? 0, max: lags.at(-1) ?? 0 };
}

async function waitFor(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((r) => setTimeout(r, 5));
}

async function main(): Promise<void> {
  const redis = await startTestRedis({ persistence: 'aof-everysec' });
  const nats = await startTestNats();
  const rig = createFeedRig();
  const rows: Row[] = [];
  try {
    rig.publish(EVENTS);
    const events = allEvents(rig);

    // Redis Streams: the bare loop, then the sink, each into its own stream.
    const client = new Redis(redis.url);
    let t0 = performance.now();
    for (let i = 0; i < events.length; i += BATCH) {
      const p = client.pipeline();
      for (const e of events.slice(i, i + BATCH))
        p.xadd('bare', `${e.cursor}-0`, 'event', e.body, 'event_id', e.id, 'type', e.type, 'team_id', '', 'policy', 'pass');
      await p.exec();
    }
    const bareRedis = EVENTS / ((performance.now() - t0) / 1000);
    client.disconnect();
    const [redisSink] = parseSinks({ sinks: [{ name: 'redis', kind: 'redis_stream', redis: { url: redis.url }, stream: 'sink' }] }, {});
    if (redisSink === undefined || !isEventLogSink(redisSink)) throw new Error('no sink');
    const sinkRedis = await timeSink(rig, redisSink);

    // JetStream: the bare loop (publish with acks, BATCH in flight), then the sink.
    const nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'BARE', subjects: ['bare.>'] });
    const js = jetstream(nc);
    t0 = performance.now();
    for (let i = 0; i < events.length; i += BATCH)
      await Promise.all(events.slice(i, i + BATCH).map((e) => js.publish(`bare.t.${e.type}`, e.body, { msgID: e.id })));
    const bareJs = EVENTS / ((performance.now() - t0) / 1000);
    await nc.close();
    const [jsSink] = parseSinks(
      { sinks: [{ name: 'js', kind: 'jetstream', servers: [nats.url], stream: 'SINK', subject_prefix: 'sink' }] },
      {},
    );
    if (jsSink === undefined || !isEventLogSink(jsSink)) throw new Error('no sink');
    const sinkJs = await timeSink(rig, jsSink);

    const lagRedis = await lagUnderChurn(rig, redisSink);
    const lagJs = await lagUnderChurn(rig, jsSink);
    rows.push({ kind: 'redis_stream', bare: bareRedis, sink: sinkRedis, lagP50: lagRedis.p50, lagMax: lagRedis.max });
    rows.push({ kind: 'jetstream', bare: bareJs, sink: sinkJs, lagP50: lagJs.p50, lagMax: lagJs.max });
  } finally {
    rig.close();
    await nats.stop();
    await redis.stop();
  }
  const f = (n: number) => Math.round(n).toLocaleString('en');
  process.stdout.write(`bench:sinks, ${f(EVENTS)} events, churn ${f(RATE)}/s for 10 s\n\n`);
  process.stdout.write(
    '| kind | bare loop events/s | sink events/s | sink/bare (goal >= 70%) | lag p50 | lag max (goal <= 1 s) |\n|---|---|---|---|---|---|\n',
  );
  for (const r of rows)
    process.stdout.write(
      `| ${r.kind} | ${f(r.bare)} | ${f(r.sink)} | ${Math.round((100 * r.sink) / r.bare)}% ${r.sink >= 0.7 * r.bare ? 'met' : 'MISSED'} | ${r.lagP50.toFixed(2)} s | ${r.lagMax.toFixed(2)} s ${r.lagMax <= 1 ? 'met' : 'MISSED'} |\n`,
    );
}

await main();
