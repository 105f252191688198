/**
 * Starting a replica: its own readonly connection to the mirror (never the
 * writer's: a read must not wait behind a publish) and the HTTP server.
 * `serve` runs one on its own; the daemon runs one when REPLICA_PORT is set.
 */
import { openMirror } from '../../db/open.js';
import { fileIdentity, judgeIdentity, lossMessage, type LossKind } from '../../db/file-identity.js';
import { ReplicaReader } from '../../db/replica-reader.js';
import type { Registry } from 'prom-client';
import { startReplicaServer } from './server.js';
import type { ReplicaSettings } from './settings.js';
import type { Logger } from 'pino';

export interface Replica {
  port: number;
  close(): Promise<void>;
}

/** How often a replica looks at MIRROR_DB's device and inode: a stat a second, not one a request. */
const WATCH_EVERY_MS = 1_000;

/**
 * Whether the file opened is still the one at `path` (db/file-identity.ts):
 * a mirror deleted or replaced under the replica is reported, and nothing
 * more is served from the old file (src/daemon/mirror-watch.ts says why).
 * The first loss is kept; a restart adopts the file then at the path.
 */
function watchFile(path: string, logger: Logger): (() => string | undefined) | undefined {
  const opened = path === ':memory:' ? undefined : fileIdentity(path);
  if (opened === undefined) return undefined;
  let lost: string | undefined;
  let lookedAt = 0;
  return () => {
    const now = Date.now();
    if (lost !== undefined || now - lookedAt < WATCH_EVERY_MS) return lost;
    lookedAt = now;
    let what: LossKind | undefined;
    try {
      what = judgeIdentity(opened, fileIdentity(path));
    } catch {
      return undefined;
    }
    if (what !== undefined) {
      lost = lossMessage(path, what, 'replica');
      logger.error({ event: 'replica.mirror_lost', what, mirrorDb: path }, lost);
    }
    return lost;
  };
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
  const server = await startReplicaServer({
    settings,
    reader,
    logger,
    lost: watchFile(mirrorDb, logger),
    ...(metricsAlsoIn === undefined ? {} : { metricsAlsoIn }),
  }).catch((err: unknown) => {
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
