/**
 * Reads what redis-durability.ts judges. INFO first: managed Redis services
 * (ElastiCache, Memorystore, Azure Cache) often refuse CONFIG but answer
 * INFO. CONFIG GET is asked only for what INFO does not carry (appendfsync)
 * and its refusal is not an error.
 */
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from './redis-connection.js';
import type { Logger } from '../src/log.js';
import {
  DURABILITY_FIX,
  decideRemovalGate,
  describeRemovalGate,
  durabilityFactsFrom,
  judgeNodes,
  parseRedisInfo,
  type DurabilityVerdict,
  type RedisDurabilityFacts,
  type RemovalGate,
} from './redis-durability.js';

export async function readRedisDurability(redis: Redis): Promise<RedisDurabilityFacts> {
  let info = new Map<string, string>();
  let readError: string | undefined;
  try {
    const [persistence, memory] = await Promise.all([redis.info('persistence'), redis.info('memory')]);
    info = parseRedisInfo(`${persistence}\n${memory}`);
  } catch (err) {
    // A lost connection is not an answer: the caller waits for Redis and asks again.
    if (!isRefusal(err)) throw err;
    readError = `INFO refused: ${err.message}`;
  }
  const config = await readConfig(redis, info.has('maxmemory_policy') ? ['appendfsync'] : ['appendfsync', 'maxmemory-policy']);
  return durabilityFactsFrom(info, config, readError);
}

async function readConfig(redis: Redis, names: readonly string[]): Promise<Map<string, string> | undefined> {
  try {
    const out = new Map<string, string>();
    for (const name of names) {
      const pairs = (await redis.config('GET', name)) as unknown;
      if (!Array.isArray(pairs)) continue;
      for (let i = 0; i + 1 < pairs.length; i += 2) out.set(String(pairs[i]), String(pairs[i + 1]));
    }
    return out;
  } catch (err) {
    // Refused (managed Redis, ACL): INFO's answer stands.
    if (isRefusal(err)) return undefined;
    throw err;
  }
}

/** Redis answered with an error (unknown command, NOPERM), as opposed to not answering. */
function isRefusal(err: unknown): err is Error {
  return err instanceof Error && err.name === 'ReplyError';
}

/** On a cluster, every master: a job lives on whichever master holds its queue's slot. */
export async function readEstateDurability(client: RedisClient): Promise<DurabilityVerdict> {
  if (!(client instanceof Cluster)) return judgeNodes([{ node: 'redis', facts: await readRedisDurability(client) }]);
  // The masters are known once the cluster has read its slots.
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  const masters = client.nodes('master');
  const nodes = await Promise.all(
    masters.map(async (node) => ({ node: `${node.options.host ?? '?'}:${node.options.port ?? '?'}`, facts: await readRedisDurability(node) })),
  );
  return judgeNodes(nodes);
}

/**
 * Start-up check for a removal worker: reads, decides, logs one line
 * (error when held, warn when running on a volatile Redis by permission).
 */
export async function checkRemovalGate(redis: RedisClient, allowVolatile: boolean, logger: Logger): Promise<RemovalGate> {
  const gate = decideRemovalGate(await readEstateDurability(redis), allowVolatile);
  const fields = { event: 'removals.redis_durability', state: gate.state, ...gate.verdict.settings, reasons: gate.verdict.reasons };
  if (gate.state === 'held') {
    logger.error({ ...fields, fix: DURABILITY_FIX }, `removal worker not started: removals ${describeRemovalGate(gate)}`);
  } else if (gate.volatileAllowed) {
    logger.warn(fields, 'removal worker running on a Redis that can lose queued removals (ALLOW_VOLATILE_REDIS=1)');
  } else {
    logger.info(fields, 'redis keeps queued removals (AOF on, noeviction)');
  }
  for (const warning of gate.verdict.warnings) logger.warn({ event: 'removals.redis_durability_warning' }, warning);
  return gate;
}
