/**
 * Starting a replica: its own readonly connection to the mirror (never the
 * writer's: a read must not wait behind a publish) and the HTTP server.
 * `serve` runs one on its own; the daemon runs one when REPLICA_PORT is set.
 */
import { openMirror } from '../../db/open.js';
import { ReplicaReader } from '../../db/replica-reader.js';
import type { Registry } from 'prom-client';
import type { Logger } from '../runtime/log.js';
import { startReplicaServer } from './server.js';
import type { ReplicaSettings } from './settings.js';

export interface Replica {
  port: number;
  close(): Promise<void>;
}

/** `metricsAlsoIn`: the daemon's registry, which then shows the replica's metrics too. */
export async function startReplica(
  mirrorDb: string,
  settings: ReplicaSettings,
  logger: Logger,
  metricsAlsoIn?: Registry,
): Promise<Replica> {
  // Random lookups: through a memory map (db/open.ts, `mapped`).
  const db = openMirror(mirrorDb, { readonly: true, mapped: true });
  let reader: ReplicaReader;
  try {
    reader = new ReplicaReader(db);
  } catch (err) {
    db.close();
    throw err;
  }
  const server = await startReplicaServer({ settings, reader, logger, ...(metricsAlsoIn === undefined ? {} : { metricsAlsoIn }) }).catch(
    (err: unknown) => {
      reader.close();
      throw err;
    },
  );
  return {
    port: server.port,
    async close() {
      await server.close();
      reader.close();
    },
  };
}
