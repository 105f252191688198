/**
 * Starting a replica: its own readonly connection to the mirror (never the
 * writer's: a read must not wait behind a publish) and the HTTP server.
 * `serve` runs one on its own; the daemon runs one when REPLICA_PORT is set.
 */
import { openMirror } from '../../db/open.js';
import { ReplicaReader } from '../../db/replica-reader.js';
import type { Logger } from '../log.js';
import { startReplicaServer } from './server.js';
import { replicaSettings, SERVE_DEFAULT_PORT, type ReplicaConfig, type ReplicaSettings } from './settings.js';

export interface Replica {
  port: number;
  close(): Promise<void>;
}

export async function startReplica(mirrorDb: string, settings: ReplicaSettings, logger: Logger): Promise<Replica> {
  const db = openMirror(mirrorDb, { readonly: true });
  let reader: ReplicaReader;
  try {
    reader = new ReplicaReader(db);
  } catch (err) {
    db.close();
    throw err;
  }
  const server = await startReplicaServer({ settings, reader, logger }).catch((err: unknown) => {
    reader.close();
    throw err;
  });
  return {
    port: server.port,
    async close() {
      await server.close();
      reader.close();
    },
  };
}

/** The daemon's replica settings: undefined when REPLICA_PORT is unset; a ConfigError when they are wrong. */
export function daemonReplicaSettings(config: ReplicaConfig & { SERVICE_API_KEY: string }): ReplicaSettings | undefined {
  if (config.REPLICA_PORT === undefined) return undefined;
  return replicaSettings(config, { serviceApiKey: config.SERVICE_API_KEY, defaultPort: SERVE_DEFAULT_PORT });
}
