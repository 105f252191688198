/**
 * Sinks over TLS to destinations the test starts, configured through
 * SINKS_FILE's `tls` { ca_file, cert_file, key_file, servername }: a private
 * `redis-server --tls-port` and a private `nats-server -js` with a TLS
 * config, each with a certificate for `bus.internal` (not the 127.0.0.1
 * connected to: the sink names it with `servername`) from a private CA.
 * Events are delivered; client certificates, when the server requires
 * them, are presented; a missing client certificate and a wrong CA are
 * refused, and `user-mirror sinks` names the sink with the cause; a clear
 * text destination beyond loopback is a configuration error unless
 * TLS_BY_PROXY.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { startSinks } from '../src/sinks/start.js';
import { runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { ensureBuilt } from './support/mirror-fixtures.js';
import { startTestNats, type TestNats } from './support/nats-server.js';
import { freePort } from './support/redis-server.js';
import { durableNodeArgs, launchRedis, stopAll, type RedisProcess } from './support/redis-process.js';
import { createFeedRig, type FeedRig } from './support/sink-rig.js';
import { makeTlsFiles, type TlsFiles } from './support/tls-files.js';

let files: TlsFiles;
let rig: FeedRig;
let redis: RedisProcess;
let tlsPort = 0;
/** The harness's own look at the stream, through the server's plain loopback port. */
let plain: Redis;
let nats: TestNats;
let nc: NatsConnection;

beforeAll(async () => {
  files = makeTlsFiles();
  rig = createFeedRig();
  ensureBuilt();
  rig.publish(40);
  redis = await launchRedis('sinks-tls', async (port, dir) => {
    tlsPort = await freePort();
    return [
      ...durableNodeArgs(port, dir),
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      files.serverCert,
      '--tls-key-file',
      files.serverKey,
      '--tls-ca-cert-file',
      files.ca,
      '--tls-auth-clients',
      'no',
    ];
  });
  plain = new Redis({ host: '127.0.0.1', port: redis.port });
  nats = await startTestNats({ tls: { certFile: files.serverCert, keyFile: files.serverKey, caFile: files.ca, verifyClients: true } });
  nc = await connect({
    servers: nats.url,
    tls: { ca: readPem(files.ca), cert: readPem(files.clientCert), key: readPem(files.clientKey), servername: files.serverName },
  } as Parameters<typeof connect>[0]);
}, 120_000);

afterAll(async () => {
  plain?.disconnect();
  await nc?.close().catch(() => undefined);
  await nats?.stop();
  if (redis !== undefined) await stopAll([redis]);
  rig?.close();
  files?.remove();
});

function readPem(path: string): string {
  return readFileSync(path, 'utf8');
}

type Tls = { ca_file?: string; cert_file?: string; key_file?: string; servername?: string };
const withCa = (extra: Tls = {}): Tls => ({ ca_file: files.ca, servername: files.serverName, ...extra });
const withClient = (extra: Tls = {}): Tls => withCa({ cert_file: files.clientCert, key_file: files.clientKey, ...extra });

const redisSink = (name: string, stream: string, tls: Tls) => ({
  name,
  kind: 'redis_stream',
  redis: { url: `rediss://127.0.0.1:${tlsPort}`, tls },
  stream,
});
const natsSink = (name: string, stream: string, tls: Tls | undefined) => ({
  name,
  kind: 'jetstream',
  servers: [nats.url],
  stream,
  subject_prefix: `um.${stream.toLowerCase()}`,
  ...(tls === undefined ? {} : { tls }),
});

/** Delivers the feed through `sinks` (SINKS_FILE JSON) in process until each holds the newest event, or fails naming why. */
async function deliver(sinks: unknown): Promise<void> {
  const running = startSinks(rig.feed, parseSinks(sinks, {}), silentLogger);
  try {
    const latest = rig.feed.latest();
    await eventually(() => running.report(new Date()).every((s) => s.position === latest));
  } finally {
    await running.close();
  }
}

/** `user-mirror sinks` over a sinks file holding `sinks`. */
async function listed(file: string, sinks: unknown[], extra: Record<string, string> = {}) {
  writeFileSync(rig.dir.file(file), JSON.stringify({ sinks }));
  return runCli(['sinks'], { MIRROR_DB: rig.dbPath, SINKS_FILE: rig.dir.file(file), ...extra }, 60_000);
}

describe('a redis_stream sink over TLS (redis-server --tls-port)', () => {
  it('delivers with the private CA and a server name that is not the address, and reads its position back over TLS', async () => {
    const sink = redisSink('tls-bus', 'over-tls', withCa());
    await deliver({ sinks: [sink] });
    expect(await plain.xlen('over-tls')).toBe(rig.feed.latest());
    const r = await listed('redis-ca.json', [sink]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^sink tls-bus \\(redis_stream, rediss://127\\.0\\.0\\.1:${tlsPort}.*\\): at cursor ${rig.feed.latest()}, 0 events behind`,
        'm',
      ),
    );
  }, 120_000);

  it('a wrong CA is refused: the sink is named FAILING with the certificate problem, and nothing is written', async () => {
    const r = await listed('redis-wrong-ca.json', [redisSink('wrong-ca', 'never', withCa({ ca_file: files.wrongCa }))]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /^sink wrong-ca \(redis_stream, .*\): position unknown - FAILING: destination failing: .*(certificate|self[- ]signed)/im,
    );
    expect(await plain.exists('never')).toBe(0);
  }, 120_000);

  it('with client certificates required, one without is refused and one with is delivered', async () => {
    await plain.config('SET', 'tls-auth-clients', 'yes');
    try {
      const without = await listed('redis-nocert.json', [redisSink('no-cert', 'certs', withCa())]);
      expect(without.code).toBe(1);
      expect(without.stdout).toMatch(/^sink no-cert \(redis_stream, .*\): position unknown - FAILING: destination failing: /m);
      const sink = redisSink('client-cert', 'certs', withClient());
      await deliver({ sinks: [sink] });
      expect(await plain.xlen('certs')).toBe(rig.feed.latest());
      const r = await listed('redis-cert.json', [sink]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
    } finally {
      await plain.config('SET', 'tls-auth-clients', 'no');
    }
  }, 120_000);
});

describe('a jetstream sink over TLS (nats-server -js, client certificates verified)', () => {
  it('delivers with the CA, a client certificate and the server name; the stream holds every event', async () => {
    const sink = natsSink('tls-js', 'OVER_TLS', withClient());
    await deliver({ sinks: [sink] });
    const jsm = await jetstreamManager(nc);
    expect((await jsm.streams.info('OVER_TLS')).state.messages).toBe(rig.feed.latest());
    const r = await listed('nats-cert.json', [sink]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`^sink tls-js \\(jetstream, tls://127\\.0\\.0\\.1:${nats.port} stream OVER_TLS.*\\): at cursor ${rig.feed.latest()}`, 'm'),
    );
  }, 120_000);

  it('without the client certificate, and with a wrong CA, the server is refused and the sink named FAILING', async () => {
    const r = await listed('nats-refused.json', [
      natsSink('js-no-cert', 'NEVER_A', withCa()),
      natsSink('js-wrong-ca', 'NEVER_B', withClient({ ca_file: files.wrongCa })),
    ]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^sink js-no-cert \(jetstream, .*\): position unknown - FAILING: destination failing: /m);
    expect(r.stdout).toMatch(
      /^sink js-wrong-ca \(jetstream, .*\): position unknown - FAILING: destination failing: .*(certificate|self[- ]signed)/im,
    );
    const jsm = await jetstreamManager(nc);
    const names: string[] = [];
    for await (const s of jsm.streams.names()) names.push(s);
    expect(names).not.toContain('NEVER_A');
    expect(names).not.toContain('NEVER_B');
  }, 120_000);
});

describe('clear text beyond loopback', () => {
  it('is a configuration error naming the sink and field, unless TLS_BY_PROXY says a proxy carries it', async () => {
    const sinks = [
      { name: 'far-redis', kind: 'redis_stream', redis: { url: `redis://${files.serverName}:6390` }, stream: 's' },
      { name: 'far-js', kind: 'jetstream', servers: [`nats://${files.serverName}:4300`], stream: 'S', subject_prefix: 'um' },
    ];
    const r = await listed('clear.json', sinks);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/sinks\[0\] "far-redis"\.redis\.url: bus\.internal is beyond this host and would get events in clear/);
    expect(r.stderr).toMatch(/sinks\[1\] "far-js"\.servers: bus\.internal is beyond this host/);
    const proxied = await listed('clear.json', sinks, { TLS_BY_PROXY: '1' });
    // Accepted; bus.internal does not resolve here, so both are named failing, not refused as configuration.
    expect(proxied.code).toBe(1);
    expect(proxied.stdout).toMatch(/^sink far-redis .*FAILING/m);
    expect(proxied.stdout).toMatch(/^sink far-js .*FAILING/m);
  }, 120_000);
});
