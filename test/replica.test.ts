/**
 * The replica's HTTP contract, against the real server over a mirror synced
 * from the stand-in: the service's wire format (bytes as stored, the same
 * 422s as the stand-in), paths with awkward ids, the key, freshness headers
 * and readiness.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror } from '../db/open.js';
import { ConfigError, readConfig, REPLICA_ENV } from '../src/runtime/config.js';
import { replicaSettings } from '../src/replica/settings.js';
import { startReplica } from '../src/replica/start.js';
import { silentLogger } from '../src/runtime/log.js';
import { encodePathSegment } from '../src/service/path-segment.js';
import { AWKWARD_IDS, awkwardRecords, createReplicaRig, SDK_KEY_HEADER, type ReplicaRig } from './support/replica-rig.js';
import { getTeam } from './support/stand-in-http.js';

const USERS = 1_200;
const SEED = 21;

interface Run {
  id: number;
  finished_at: string;
}

function lastRun(rig: ReplicaRig, status: string): Run {
  const row = rig.sync.db
    .prepare<[string], Run>('SELECT id, finished_at FROM sync_runs WHERE status = ? ORDER BY id DESC LIMIT 1')
    .get(status);
  if (row === undefined) throw new Error(`no ${status} run`);
  return row;
}

function activeRaws(rig: ReplicaRig): string[] {
  return rig.sync.db.prepare<[], string>('SELECT raw FROM users WHERE deleted_at IS NULL ORDER BY rowid').pluck().all();
}

describe('the replica over a synced mirror', () => {
  let rig: ReplicaRig;
  let deletedClientId: string;

  beforeAll(async () => {
    rig = await createReplicaRig({ users: USERS, seed: SEED, records: awkwardRecords(SEED) });
    expect((await rig.sync.sync()).status).toBe('succeeded');
    const [gone] = rig.sync.standIn.directory.page(100, 1);
    deletedClientId = String(gone?.client_user_id);
    rig.sync.standIn.directory.delete([String(gone?.user_id)]);
    expect((await rig.sync.sync()).status).toBe('succeeded');
  });
  afterAll(() => rig?.close());

  it("lists the active users as stored, in rowid order, in the service's page shape", async () => {
    const raws = activeRaws(rig);
    expect(raws).toHaveLength(USERS + AWKWARD_IDS.length - 1);
    const res = await rig.get('/v2/user/?offset=7&limit=25');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.text).toBe(`{"users":[${raws.slice(7, 32).join(',')}],"total":${raws.length},"offset":7,"limit":25}`);
    const defaults = JSON.parse((await rig.get('/v2/user')).text) as { users: unknown[]; offset: number; limit: number };
    expect(defaults).toMatchObject({ offset: 0, limit: 100 });
    expect(defaults.users).toHaveLength(100);
    const past = JSON.parse((await rig.get(`/v2/user?offset=${raws.length}&limit=500`)).text) as { users: unknown[]; total: number };
    expect(past).toEqual({ users: [], total: raws.length, offset: raws.length, limit: 500 });
  });

  it('the official SDK pages every active user once', async () => {
    const sdk = rig.sdk();
    const seen: string[] = [];
    for (let offset = 0; ; offset += 500) {
      const page = await sdk.user.getAll({ offset, limit: 500 });
      seen.push(...page.users.map((u) => u.userId));
      if (page.users.length < 500) break;
    }
    const active = rig.sync.db.prepare<[], string>('SELECT user_id FROM users WHERE deleted_at IS NULL ORDER BY rowid').pluck().all();
    expect(seen).toEqual(active);
    // docs/replica.md: the first sync stored them as the listing's pages arrived, each page in its order, not sorted by user_id.
    const listing = rig.sync.standIn.directory.page(0, active.length).map((u) => String(u.user_id));
    const position = new Map(listing.map((id, i) => [id, i]));
    const steps = seen.slice(1).filter((id, i) => (position.get(id) ?? -1) === (position.get(seen[i] ?? '') ?? -2) + 1).length;
    expect(steps).toBeGreaterThan(seen.length * 0.95);
    expect(seen).not.toEqual([...seen].sort());
  });

  it('the official SDK resolves awkward client ids, byte for byte as stored', async () => {
    const sdk = rig.sdk();
    const stored = rig.sync.db.prepare<[string], string>('SELECT raw FROM users WHERE client_user_id = ? AND deleted_at IS NULL').pluck();
    // The SDK leaves dots unencoded and its URL parser folds '..'; that one is checked below with a raw path.
    for (const id of AWKWARD_IDS.filter((i) => i !== '..')) {
      const user = await sdk.user.getByClientUserId(id);
      expect(user.clientUserId, id).toBe(id);
      const raw = await rig.get(`/v2/user/resolve/${encodeURIComponent(id)}`);
      expect(raw.text, id).toBe(stored.get(id));
    }
    for (const id of AWKWARD_IDS) {
      const raw = await rig.get(`/v2/user/resolve/${encodePathSegment(id)}`);
      expect(raw.status, id).toBe(200);
      expect(raw.text, id).toBe(stored.get(id));
    }
  });

  it('a deleted or unknown user is a 404 with a detail string, as from the service', async () => {
    const err = await rig
      .sdk()
      .user.getByClientUserId(deletedClientId)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toMatchObject({ statusCode: 404, body: { detail: 'User not found' } });
    const unknown = await rig.get(`/v2/user/resolve/${encodeURIComponent('nobody/at all?')}`);
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text)).toEqual({ detail: 'User not found' });
    // A raw '/' is not part of an id: the path matches no route.
    expect((await rig.get('/v2/user/resolve/a/b')).status).toBe(404);
  });

  it('refuses a missing, wrong or service key with 401, echoing nothing and reading nothing', async () => {
    const serviceKey = rig.sync.standIn.apiKey;
    const tries: Array<Record<string, string>> = [
      {},
      { [SDK_KEY_HEADER]: 'rk_wrong' },
      { [SDK_KEY_HEADER]: serviceKey },
      { [rig.sync.standIn.apiKeyHeader]: serviceKey },
      { 'x-service-api-key': rig.apiKey },
    ];
    for (const headers of tries) {
      for (const path of ['/v2/user', `/v2/user/resolve/${encodeURIComponent(deletedClientId)}`, '/v2/nothing']) {
        const res = await rig.get(path, headers);
        expect(res.status, `${path} ${Object.keys(headers).join()}`).toBe(401);
        expect(JSON.parse(res.text)).toEqual({ detail: `Missing or invalid API key (expected in the header ${SDK_KEY_HEADER})` });
        expect(res.headers['x-mirror-run-id']).toBeUndefined();
        expect(JSON.stringify(res)).not.toContain(serviceKey);
      }
    }
    const sdkErr = await rig
      .sdk(serviceKey)
      .user.getAll({})
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(sdkErr).toMatchObject({ statusCode: 401 });
  });

  it('answers a bad limit or offset with the same 422 body as the service (the stand-in)', async () => {
    const queries = ['limit=0', 'limit=501', 'limit=abc', 'offset=-1', 'offset=x&limit=0', 'limit=1.5', 'offset=99999999999999999999'];
    for (const query of queries) {
      const ours = await rig.get(`/v2/user/?${query}`);
      const theirs = await getTeam(rig.sync.standIn, `/v2/user/?${query}`);
      expect(theirs.status, query).toBe(422);
      expect(ours.status, query).toBe(422);
      expect(ours.text, query).toBe(theirs.text);
      expect(ours.headers['x-mirror-run-id']).toBeDefined();
    }
  });

  it('echoes at most the head of a long bad value in a 422, with its size', async () => {
    const long = `x${'9'.repeat(10 * 1024 - 1)}`;
    for (const path of [`/v2/user/?limit=${long}`, `/mirror/v1/changes?after=${long}`]) {
      const res = await rig.get(path);
      expect(res.status, path).toBe(422);
      const body = JSON.parse(res.text) as { detail: Array<{ input: unknown }> };
      expect(body.detail[0]?.input, path).toBe(`x${'9'.repeat(63)}… (10240 bytes)`);
      expect(res.text.length, path).toBeLessThan(400);
    }
  });

  it('carries the run and the time of the last succeeded sync on every answer that reads the mirror', async () => {
    const run = lastRun(rig, 'succeeded');
    for (const path of ['/v2/user', '/v2/user/resolve/nobody', '/healthz', '/readyz']) {
      const res = await rig.get(path);
      expect(res.headers['x-mirror-run-id'], path).toBe(String(run.id));
      expect(res.headers['x-mirror-synced-at'], path).toBe(run.finished_at);
      expect(res.headers.warning, path).toBeUndefined();
    }
    expect((await rig.get('/healthz', {})).status).toBe(200);
    const ready = await rig.get('/readyz', {});
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.text)).toMatchObject({ ready: true, runId: run.id, syncedAt: run.finished_at, maxStalenessSeconds: 3600 });
  });

  it('past REPLICA_MAX_STALENESS_S: /readyz 503, answers still served with a Warning', async () => {
    const settings = { ...rig.settings, maxStalenessMs: 1 };
    const stale = await startReplica(rig.sync.dbPath, settings, silentLogger);
    try {
      await new Promise((r) => setTimeout(r, 5));
      const base = `http://127.0.0.1:${stale.port}`;
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(503);
      expect(ready.headers.get('warning')).toBe('110 - "Response is Stale"');
      const list = await fetch(`${base}/v2/user?limit=1`, { headers: { [SDK_KEY_HEADER]: rig.apiKey } });
      expect(list.status).toBe(200);
      expect(list.headers.get('warning')).toBe('110 - "Response is Stale"');
    } finally {
      await stale.close();
    }
  });

  it('only GET on the data routes (405 with Allow)', async () => {
    const res = await fetch(`${rig.baseUrl}/v2/user`, { method: 'POST', headers: { [SDK_KEY_HEADER]: rig.apiKey } });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET');
  });
});

describe('a mirror that never completed a sync', () => {
  it('is not ready and serves 503 rather than claiming every user is unknown', async () => {
    const rig = await createReplicaRig({ users: 10, seed: 1 });
    try {
      expect((await rig.get('/readyz')).status).toBe(503);
      const res = await rig.get('/v2/user/resolve/anyone');
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBe('30');
      expect((await rig.get('/v2/user')).status).toBe(503);
      expect((await rig.get('/healthz')).status).toBe(200);
    } finally {
      await rig.close();
    }
  });
});

describe('replica configuration', () => {
  const env = { REPLICA_PORT: '0', MIRROR_DB: '/tmp/none.db' };

  it("defaults: 127.0.0.1, the service key header and the official SDK's, one hour of staleness", () => {
    const s = replicaSettings(readConfig(REPLICA_ENV, { ...env, REPLICA_API_KEY: 'rk_a' }), { serviceApiKey: 'sk_b', defaultPort: 8788 });
    expect(s).toEqual({
      host: '127.0.0.1',
      port: 0,
      apiKey: 'rk_a',
      apiKeyHeaders: ['x-service-api-key', 'x-vital-api-key'],
      maxStalenessMs: 3_600_000,
      maxConnections: 4_096,
      headersTimeoutMs: 10_000,
      idleTimeoutMs: 5_000,
    });
    const other = readConfig(REPLICA_ENV, { REPLICA_API_KEY: 'rk_a', SERVICE_API_KEY_HEADER: 'X-Vital-API-Key' });
    expect(replicaSettings(other, { serviceApiKey: undefined, defaultPort: 8788 })).toMatchObject({
      port: 8788,
      apiKeyHeaders: ['x-vital-api-key'],
    });
    const only = readConfig(REPLICA_ENV, { REPLICA_API_KEY: 'rk_a', REPLICA_API_KEY_HEADER: 'X-Replica-Key' });
    expect(replicaSettings(only, { serviceApiKey: undefined, defaultPort: 8788 }).apiKeyHeaders).toEqual(['x-replica-key']);
  });

  it('derives the connection cap from the descriptor limit, and refuses one the limit cannot hold', () => {
    const sources = { serviceApiKey: undefined, defaultPort: 8788 };
    const config = readConfig(REPLICA_ENV, { ...env, REPLICA_API_KEY: 'rk_a' });
    expect(replicaSettings(config, { ...sources, descriptorLimit: 1_024 }).maxConnections).toBe(1_024 - 128);
    expect(replicaSettings(config, { ...sources, descriptorLimit: 1_048_576 }).maxConnections).toBe(4_096);
    const given = readConfig(REPLICA_ENV, { ...env, REPLICA_API_KEY: 'rk_a', REPLICA_MAX_CONNECTIONS: '2000' });
    expect(replicaSettings(given, { ...sources, descriptorLimit: 65_536 }).maxConnections).toBe(2_000);
    expect(() => replicaSettings(given, { ...sources, descriptorLimit: 1_024 })).toThrow(
      /REPLICA_MAX_CONNECTIONS: 2000 is more than this process can hold: its descriptor limit is 1024 .* lower the cap to 896/,
    );
  });

  it('refuses the service key as the replica key, and a missing key without one generated', () => {
    const same = readConfig(REPLICA_ENV, { ...env, REPLICA_API_KEY: 'sk_same' });
    expect(() => replicaSettings(same, { serviceApiKey: 'sk_same', defaultPort: 8788 })).toThrow(ConfigError);
    expect(() => replicaSettings(same, { serviceApiKey: 'sk_same', defaultPort: 8788 })).not.toThrow(/sk_same/);
    const none = readConfig(REPLICA_ENV, env);
    expect(() => replicaSettings(none, { serviceApiKey: undefined, defaultPort: 8788 })).toThrow(/REPLICA_API_KEY: is required/);
    expect(replicaSettings(none, { serviceApiKey: undefined, defaultPort: 8788, generatedKey: 'rk_gen' }).apiKey).toBe('rk_gen');
  });

  it('opens an existing mirror file only, read-only', async () => {
    await expect(
      startReplica(
        '/nonexistent/dir/mirror.db',
        replicaSettings(readConfig(REPLICA_ENV, { ...env, REPLICA_API_KEY: 'rk_a' }), {
          serviceApiKey: undefined,
          defaultPort: 0,
        }),
        silentLogger,
      ),
    ).rejects.toThrow();
    const dir = mkdtempSync(join(tmpdir(), 'replica-ro-'));
    try {
      openMirror(join(dir, 'm.db')).close();
      const r = await startReplica(
        join(dir, 'm.db'),
        {
          host: '127.0.0.1',
          port: 0,
          apiKey: 'rk_a',
          apiKeyHeaders: ['x'],
          maxStalenessMs: 1000,
          maxConnections: 64,
          headersTimeoutMs: 10_000,
          idleTimeoutMs: 5_000,
        },
        silentLogger,
      );
      await r.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
