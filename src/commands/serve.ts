/**
 * `user-mirror serve`: the mirror as a read-only replica of the service's
 * list and resolve endpoints (src/replica), on REPLICA_HOST:REPLICA_PORT
 * (default 127.0.0.1:8788), until SIGINT or SIGTERM.
 *
 * Without REPLICA_API_KEY a key is generated and printed once on stdout:
 * the only place it ever appears. Exit 2 for a configuration error (among
 * them REPLICA_API_KEY equal to SERVICE_API_KEY), 1 when the mirror cannot
 * be opened or the port bound.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig, REPLICA_ENV } from '../runtime/config.js';
import { createLogger } from '../runtime/log.js';
import { replicaSettings, SERVE_DEFAULT_PORT, startReplica } from '../replica/settings.js';
import { untilStopSignal } from '../runtime/lifecycle.js';

const Args = z.object({ positionals: z.array(z.string()).max(0, 'takes no arguments') });

export default async function serve(argv: string[]): Promise<number> {
  parseCommandArgs(argv, {}, Args);
  const config = readConfig([...REPLICA_ENV, 'LOG_LEVEL']);
  // Read only to refuse it as the replica's key; the service key is optional here.
  const serviceApiKey = process.env.SERVICE_API_KEY ? readConfig(['SERVICE_API_KEY']).SERVICE_API_KEY : undefined;
  const generatedKey = config.REPLICA_API_KEY === undefined ? `rk_${randomBytes(24).toString('hex')}` : undefined;
  const settings = replicaSettings(config, { serviceApiKey, defaultPort: SERVE_DEFAULT_PORT, generatedKey });
  const logger = createLogger(config.LOG_LEVEL);
  const replica = await startReplica(config.MIRROR_DB, settings, logger);
  if (generatedKey !== undefined) {
    process.stdout.write(`# generated for this run (set REPLICA_API_KEY to keep one across restarts):\nREPLICA_API_KEY=${generatedKey}\n`);
  }
  const signal = await untilStopSignal();
  await replica.close();
  logger.info({ event: 'replica.stopped', signal }, 'replica stopped');
  return 0;
}
