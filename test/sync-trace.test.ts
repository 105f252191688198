/**
 * A sync run is one trace, and webhook deliveries carry their own spans, at
 * a real OTLP/HTTP receiver (JSON): `sync --once` against the stand-in, and
 * the daemon, whose sync runs in a child process that continues the trace
 * of the daemon's sync job, and whose webhook worker sends a span per
 * delivery. Pages are spans (500 records each); no record is; no user id,
 * client_user_id, key or webhook token reaches the receiver.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { daemonEnv, runCli, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';
import { eventually, eventuallyCount } from './support/eventually.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from './support/otlp-receiver.js';
import { freePort, startTestRedis, type TestRedis } from './support/redis-server.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';

const CLIENT = 3;
const CONSUMER = 5;

let standIn: StandIn;
let otlp: OtlpReceiver;
let redis: TestRedis;
let hooks: Receiver;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  standIn = await startStandIn({ port: 0, users: 1_200, seed: 61 });
  otlp = await startOtlpReceiver();
  redis = await startTestRedis();
  hooks = await startReceiver();
  dir = mkdtempSync(join(tmpdir(), 'sync-trace-'));
});
afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await hooks?.close();
  await redis?.stop();
  await otlp?.close();
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const traced = (service: string): Record<string, string> => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_SERVICE_NAME: service,
});

const childrenOf = (parent: ReceivedSpan): ReceivedSpan[] =>
  otlp.spans.filter((s) => s.traceId === parent.traceId && s.parentSpanId === parent.spanId);

function someClientUserIds(mirrorDb: string): string[] {
  const db = new Database(mirrorDb, { readonly: true });
  try {
    return db.prepare<[], string>('SELECT client_user_id FROM users ORDER BY client_user_id LIMIT 20').pluck().all();
  } finally {
    db.close();
  }
}

describe('sync --once', () => {
  it('is one trace: the run, a span per page, the publish and the checkpoint', async () => {
    const mirrorDb = join(dir, 'once.db');
    const r = await runCli(['sync', '--once'], {
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: mirrorDb,
      ...traced('sync-once'),
    });
    expect(r.code, r.stderr).toBe(0);
    const run = await eventually(() => otlp.spans.find((s) => s.service === 'sync-once' && s.name === 'sync run'), 90_000, 'the run span');
    expect(run.parentSpanId).toBe('');
    expect(run.attributes).toMatchObject({ 'user_mirror.status': 'succeeded', 'user_mirror.pages': 3, 'user_mirror.users_seen': 1_200 });
    const under = childrenOf(run);
    const pages = under.filter((s) => s.name === 'GET page');
    expect(pages).toHaveLength(3);
    for (const p of pages) expect(p.kind).toBe(CLIENT);
    expect(pages.map((p) => p.attributes['user_mirror.records']).reduce((a, b) => Number(a) + Number(b), 0)).toBe(1_200);
    expect(under.filter((s) => s.name === 'sync publish')).toHaveLength(1);
    expect(under.filter((s) => s.name === 'sync checkpoint')).toHaveLength(1);
    const sent = otlp.bodies.join('\n');
    for (const secret of [standIn.apiKey, ...someClientUserIds(mirrorDb)]) expect(sent).not.toContain(secret);
  });
});

describe('the daemon', () => {
  it("continues the sync job's trace in its sync process, and sends a span per webhook delivery", async () => {
    const mirrorDb = join(dir, 'daemon.db');
    daemon = spawnDaemon(
      daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb,
        queuePrefix: `t${Date.now()}`,
        statusPort: await freePort(),
        cron: '*/30 * * * * *',
        extra: { WEBHOOK_URL: hooks.url, WEBHOOK_SECRET: SECRET, CHANGES_BASELINE: 'events', ...traced('daemon') },
      }),
    );
    await daemon.ready;
    // 1,200 deliveries, each a POST and a span: on a busy machine the whole takes minutes, so the wait is for progress.
    await eventuallyCount(() => hooks.delivered().length, 1_200, 90_000, 'the first sync’s events delivered');
    await daemon.stop('SIGTERM');
    daemon = undefined;

    const run = await eventually(() => otlp.spans.find((s) => s.service === 'daemon' && s.name === 'sync run'), 90_000, 'the run span');
    const job = otlp.spans.find((s) => s.spanId === run.parentSpanId);
    expect(job?.name).toBe('sync job');
    expect(job?.kind).toBe(CONSUMER);
    expect(job?.traceId).toBe(run.traceId);
    expect(childrenOf(run).filter((s) => s.name === 'GET page').length).toBeGreaterThanOrEqual(3);

    const deliveries = otlp.spans.filter((s) => s.service === 'daemon' && s.kind === CONSUMER && s.name.includes('webhook'));
    expect(deliveries.length).toBeGreaterThanOrEqual(1_200);
    const post = childrenOf(deliveries[0] as ReceivedSpan).find((s) => s.name === 'POST');
    expect(post?.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.response.status_code': 204,
      'server.address': new URL(hooks.url).host,
    });
    const sent = otlp.bodies.join('\n');
    for (const secret of ['token=abc', '/hooks', SECRET, standIn.apiKey, ...someClientUserIds(mirrorDb)])
      expect(sent).not.toContain(secret);
  });
});
