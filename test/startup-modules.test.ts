/**
 * What a command loads, not how long it takes: the built CLI in a child
 * process, with a module hook (`--import`, node:module registerHooks) that
 * writes every module the process loaded, ESM and CommonJS alike, to a file
 * at exit. A command pays at start-up for every package it loads, so each
 * loads only what it uses: an offline `resolve` no HTTP client and no
 * Redis, `status` no logger, `sync --once` and the daemon's sync process
 * no Redis and no cron library.
 * The online resolve is the control: it shows the hook sees what a command
 * does load. And nothing of OpenTelemetry unless the OTEL_* variables ask
 * for traces (src/runtime/tracing.ts); `remove-member` with them set is that
 * control.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { runCli } from './support/cli-process.js';
import { runDaemonSyncChild } from './support/sync-child.js';
import { ensureBuilt, tempDir, type TempDir } from './support/mirror-fixtures.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { startOtlpReceiver, type OtlpReceiver } from './support/otlp-receiver.js';

const HOOK = `import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const urls = new Set();
registerHooks({ load(url, context, nextLoad) { urls.add(url); return nextLoad(url, context); } });
process.on('exit', () => writeFileSync(process.env.MODULE_LIST_FILE, [...urls].join('\\n')));
`;

interface Loaded {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Packages under node_modules, by name. */
  packages: Set<string>;
  /** Files of node-cron, the one package whose copies are counted. */
  nodeCronEntries: string[];
  /** The project's own modules, as paths under dist/ (src/commands/resolve.js). */
  own: Set<string>;
}

let dir: TempDir;
let standIn: StandIn;
let redis: TestRedis;
let hookFile: string;
let mirror: string;
let clientUserId: string;
let runs = 0;
let receiver: OtlpReceiver;

const otel = (l: Pick<Loaded, 'packages'>): string[] => [...l.packages].filter((p) => p.startsWith('@opentelemetry/'));

const hookEnv = (list: string): Record<string, string> => ({
  NODE_OPTIONS: `--import=${pathToFileURL(hookFile).href}`,
  MODULE_LIST_FILE: list,
  MIRROR_DB: mirror,
});

async function runLoading(args: string[], extraEnv: Record<string, string> = {}): Promise<Loaded> {
  const list = dir.file(`modules-${++runs}.txt`);
  const r = await runCli(args, { PATH: process.env.PATH ?? '', ...hookEnv(list), ...extraEnv });
  return { ...r, ...loadedFrom(list) };
}

function loadedFrom(list: string): Omit<Loaded, 'code' | 'stdout' | 'stderr'> {
  const urls = readFileSync(list, 'utf8').split('\n');
  const packages = new Set(urls.flatMap((u) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(u)?.[1] ?? []));
  const own = new Set(urls.flatMap((u) => (u.includes('/node_modules/') ? [] : (/\/dist\/(.+)$/.exec(u)?.[1] ?? []))));
  const nodeCronEntries = urls.filter((u) => /\/node_modules\/node-cron\/dist\/node-cron\.c?js$/.test(u));
  return { packages, own, nodeCronEntries };
}

const serviceEnv = (): Record<string, string> => ({
  SERVICE_BASE_URL: standIn.baseUrl,
  SERVICE_API_KEY: standIn.apiKey,
  SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
});

let sync: Loaded;

beforeAll(async () => {
  ensureBuilt();
  dir = tempDir('startup-modules-');
  hookFile = dir.file('module-list.mjs');
  writeFileSync(hookFile, HOOK);
  mirror = dir.file('mirror.db');
  standIn = await startStandIn({ port: 0, users: 20, seed: 41 });
  redis = await startTestRedis({ persistence: 'none' });
  receiver = await startOtlpReceiver();
  sync = await runLoading(['sync', '--once'], serviceEnv());
  const db = new Database(mirror, { readonly: true });
  try {
    clientUserId = db.prepare<[], string>('SELECT client_user_id FROM users ORDER BY client_user_id LIMIT 1').pluck().get() ?? '';
  } finally {
    db.close();
  }
});

afterAll(async () => {
  await standIn?.close();
  await redis?.stop();
  await receiver?.close();
  dir?.remove();
});

describe('sync --once', () => {
  it('loads the HTTP client and the logger, but neither Redis nor the cron library', () => {
    expect(sync.code, sync.stderr).toBe(0);
    expect([...sync.packages]).toEqual(expect.arrayContaining(['undici', 'pino', 'better-sqlite3']));
    for (const p of ['bullmq', 'ioredis', 'node-cron']) expect(sync.packages.has(p), p).toBe(false);
    expect(otel(sync)).toEqual([]);
  });
});

describe("the daemon's sync process", () => {
  it('loads what `sync --once` does: the HTTP client and the logger, neither Redis nor the cron library', async () => {
    const list = dir.file('modules-daemon-child.txt');
    const outcome = await runDaemonSyncChild({ ...hookEnv(list), ...serviceEnv(), LOG_LEVEL: 'warn' });
    expect(outcome.ran && outcome.value.status).toBe('succeeded');
    const child = loadedFrom(list);
    expect([...child.packages]).toEqual(expect.arrayContaining(['undici', 'pino', 'better-sqlite3']));
    for (const p of ['bullmq', 'ioredis', 'node-cron']) expect(child.packages.has(p), p).toBe(false);
    expect(otel(child)).toEqual([]);
  });
});

describe('resolve', () => {
  it('offline: no HTTP client, no Redis, no logger, no cron library, and not the online write path', async () => {
    const r = await runLoading(['resolve', clientUserId]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ client_user_id: clientUserId });
    for (const p of ['undici', 'bullmq', 'ioredis', 'pino', 'node-cron']) expect(r.packages.has(p), p).toBe(false);
    expect(otel(r)).toEqual([]);
    for (const m of ['src/service/client.js', 'db/user-refresh.js', 'db/user-writes.js', 'db/history-reader.js']) {
      expect(r.own.has(m), m).toBe(false);
    }
  });

  it('--as-of loads the history reader, still no HTTP client', async () => {
    const r = await runLoading(['resolve', clientUserId, '--as-of', new Date().toISOString()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.own.has('db/history-reader.js')).toBe(true);
    expect(r.packages.has('undici')).toBe(false);
  });

  it('--online loads the HTTP client and the write path (the hook sees what a command loads)', async () => {
    const r = await runLoading(['resolve', clientUserId, '--online'], serviceEnv());
    expect(r.code, r.stderr).toBe(0);
    expect(r.packages.has('undici')).toBe(true);
    expect(r.own.has('db/user-refresh.js')).toBe(true);
    for (const p of ['bullmq', 'ioredis', 'pino']) expect(r.packages.has(p), p).toBe(false);
  });
});

describe('status', () => {
  it('loads BullMQ to read the queues, one copy of node-cron, and no logger or HTTP client', async () => {
    const r = await runLoading(['status'], { REDIS_URL: redis.url, QUEUE_PREFIX: 'startup-modules' });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^queues$/m);
    expect([...r.packages]).toEqual(expect.arrayContaining(['bullmq', 'ioredis']));
    expect(r.nodeCronEntries).toHaveLength(1);
    for (const p of ['pino', 'undici']) expect(r.packages.has(p), p).toBe(false);
    expect(otel(r)).toEqual([]);
  });
});

describe('tracing (OTEL_* variables)', () => {
  const removal = (extraEnv: Record<string, string>) =>
    runLoading(['remove-member', '00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002'], {
      REDIS_URL: redis.url,
      QUEUE_PREFIX: 'startup-modules',
      MANAGEMENT_URL: 'http://127.0.0.1:9/',
      ...extraEnv,
    });

  it('remove-member loads nothing of OpenTelemetry when the variables are unset, nor with OTEL_SDK_DISABLED=true', async () => {
    const unset: Record<string, string> = {};
    for (const env of [unset, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SDK_DISABLED: 'true' }]) {
      const r = await removal(env);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.packages.has('bullmq')).toBe(true);
      expect(otel(r)).toEqual([]);
      expect(r.own.has('src/runtime/tracing-sdk.js')).toBe(false);
    }
  });

  it('loads the SDK and the exporter when they ask for traces (the control)', async () => {
    const r = await removal({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(otel(r)).toEqual(
      expect.arrayContaining(['@opentelemetry/api', '@opentelemetry/sdk-trace', '@opentelemetry/exporter-trace-otlp-http']),
    );
    expect(r.own.has('src/runtime/tracing-sdk.js')).toBe(true);
  });
});
