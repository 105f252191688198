/**
 * A replica over a real mirror: the stand-in over HTTP, a mirror synced from
 * it (test/support/sync-rig.ts), and the replica's HTTP server in this
 * process on its own readonly connection. Plus records with awkward
 * client_user_ids, and the official SDK pointed at the replica.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { VitalClient } from '@tryvital/vital-node';
import { Client } from 'undici';
import { generateUser, userKeys, type JsonRecord, type StandInOptions } from '../../src/stand-in/index.js';
import { startReplica, type Replica } from '../../src/replica/start.js';
import type { ReplicaSettings } from '../../src/replica/settings.js';
import { silentLogger } from '../../src/runtime/log.js';
import { createSyncRig, type SyncRig } from './sync-rig.js';

/** The header the official SDK sends its key in. */
export const SDK_KEY_HEADER = 'x-vital-api-key';

/** Ids a client must encode in a path segment; '..' and '.' only survive a client that encodes dots. */
export const AWKWARD_IDS = [
  'a/b',
  'a/../b',
  'what?x=1&y=2',
  '100%',
  '%2F-literal',
  'with space',
  'ünïcødé 用户',
  '#hash',
  'plus+sign',
  '..',
];

export function awkwardRecords(seed: number): JsonRecord[] {
  const keys = userKeys(seed);
  return AWKWARD_IDS.map((id, i) => ({ ...generateUser(keys, 1_000_000 + i), user_id: randomUUID(), client_user_id: id }));
}

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

export interface ReplicaRig {
  sync: SyncRig;
  replica: Replica;
  baseUrl: string;
  apiKey: string;
  settings: ReplicaSettings;
  sdk(apiKey?: string): VitalClient;
  /** GET on the replica with the key (unless `headers` replaces it); the raw path is sent as given. */
  get(path: string, headers?: Record<string, string>): Promise<Reply>;
  close(): Promise<void>;
}

export async function createReplicaRig(standIn: StandInOptions, settings: Partial<ReplicaSettings> = {}): Promise<ReplicaRig> {
  const sync = await createSyncRig(standIn);
  const full: ReplicaSettings = {
    host: '127.0.0.1',
    port: 0,
    apiKey: `rk_test_${randomBytes(12).toString('hex')}`,
    apiKeyHeaders: [SDK_KEY_HEADER],
    maxStalenessMs: 3_600_000,
    maxConnections: 1_024,
    headersTimeoutMs: 10_000,
    idleTimeoutMs: 5_000,
    ...settings,
  };
  let replica: Replica;
  try {
    replica = await startReplica(sync.dbPath, full, silentLogger);
  } catch (err) {
    await sync.close();
    throw err;
  }
  const baseUrl = `http://127.0.0.1:${replica.port}`;
  // undici's Client sends the path as written: fetch's URL parser would resolve %2E%2E segments first.
  const http = new Client(baseUrl);
  return {
    sync,
    replica,
    baseUrl,
    apiKey: full.apiKey,
    settings: full,
    sdk: (apiKey = full.apiKey) => new VitalClient({ apiKey, baseUrl, maxRetries: 0 }),
    async get(path, headers = { [SDK_KEY_HEADER]: full.apiKey }) {
      const res = await http.request({ method: 'GET', path, headers });
      return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
    },
    async close() {
      await http.close();
      await replica.close();
      await sync.close();
    },
  };
}
