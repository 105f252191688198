/**
 * Can this Redis lose a queued removal? Decided here, without I/O, from what
 * Redis reports about itself (see below for the reading).
 *
 * A removal job exists only in Redis until a worker finishes it. Two settings
 * decide whether it survives:
 *  - persistence: without AOF a restart loses everything written since the
 *    last RDB snapshot (or everything, with `save ""`): in the incident 324 of
 *    500 queued removals vanished on one restart;
 *  - eviction: with any `maxmemory-policy` but `noeviction`, Redis under
 *    memory pressure deletes keys, job hashes included, without a trace.
 *
 * `appendfsync no` is only a warning: a crash of Redis itself loses nothing
 * (the OS still holds the writes); a crash of the host may lose ~30 s.
 *
 * A fact Redis would not report counts against durability: a removal queue
 * that cannot show it is safe is treated as unsafe, and the operator who
 * knows better says so with ALLOW_VOLATILE_REDIS=1.
 */
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from './redis-connection.js';
import type { Logger } from 'pino';

export interface RedisDurabilityFacts {
  /** `INFO persistence` → aof_enabled; undefined when not reported. */
  aofEnabled: boolean | undefined;
  /** `CONFIG GET appendfsync`; undefined when CONFIG is refused (managed Redis). */
  appendfsync: string | undefined;
  /** `INFO memory` → maxmemory_policy, else `CONFIG GET maxmemory-policy`. */
  maxmemoryPolicy: string | undefined;
  /** Why some fact is missing (INFO refused, a proxy that hides it). */
  readError?: string | undefined;
}

export interface DurabilityVerdict {
  durable: boolean;
  /** Why not durable; empty when durable. */
  reasons: string[];
  /** Weaker than ideal but not a reason to hold. */
  warnings: string[];
  /** The settings as read, for status and logs ('unknown' when not reported). */
  settings: { appendonly: string; appendfsync: string; maxmemoryPolicy: string };
}

export function judgeRedisDurability(facts: RedisDurabilityFacts): DurabilityVerdict {
  const reasons: string[] = [];
  const warnings: string[] = [];
  const unreadable = facts.readError === undefined ? '' : ` (${facts.readError})`;
  if (facts.aofEnabled === undefined) reasons.push(`Redis did not report whether AOF is on${unreadable}`);
  else if (!facts.aofEnabled) reasons.push('AOF persistence is off (appendonly no): a Redis restart loses queued jobs');
  if (facts.maxmemoryPolicy === undefined) reasons.push(`Redis did not report its maxmemory-policy${unreadable}`);
  else if (facts.maxmemoryPolicy !== 'noeviction') {
    reasons.push(`maxmemory-policy is ${facts.maxmemoryPolicy}, not noeviction: under memory pressure Redis deletes queued jobs`);
  }
  if (facts.aofEnabled === true && facts.appendfsync === 'no') {
    warnings.push('appendfsync is no: a host crash may lose the last ~30 s of queued jobs (use everysec or always)');
  }
  return {
    durable: reasons.length === 0,
    reasons,
    warnings,
    settings: {
      appendonly: facts.aofEnabled === undefined ? 'unknown' : facts.aofEnabled ? 'yes' : 'no',
      appendfsync: facts.appendfsync ?? 'unknown',
      maxmemoryPolicy: facts.maxmemoryPolicy ?? 'unknown',
    },
  };
}

/**
 * A cluster keeps a removal only if the master holding its slot does: the
 * verdict over several masters is durable only if each is, and each reason
 * names its node.
 */
function judgeNodes(nodes: ReadonlyArray<{ node: string; facts: RedisDurabilityFacts }>): DurabilityVerdict {
  if (nodes.length === 1 && nodes[0] !== undefined) return judgeRedisDurability(nodes[0].facts);
  const verdicts = nodes.map(({ node, facts }) => ({ node, verdict: judgeRedisDurability(facts) }));
  const same = (pick: (v: DurabilityVerdict) => string): string => {
    const values = new Set(verdicts.map((v) => pick(v.verdict)));
    return values.size === 1 ? ([...values][0] ?? 'unknown') : 'mixed';
  };
  if (verdicts.length === 0) {
    return {
      durable: false,
      reasons: ['no Redis master reported its settings'],
      warnings: [],
      settings: { appendonly: 'unknown', appendfsync: 'unknown', maxmemoryPolicy: 'unknown' },
    };
  }
  return {
    durable: verdicts.every((v) => v.verdict.durable),
    reasons: verdicts.flatMap((v) => v.verdict.reasons.map((r) => `${v.node}: ${r}`)),
    warnings: verdicts.flatMap((v) => v.verdict.warnings.map((w) => `${v.node}: ${w}`)),
    settings: {
      appendonly: same((v) => v.settings.appendonly),
      appendfsync: same((v) => v.settings.appendfsync),
      maxmemoryPolicy: same((v) => v.settings.maxmemoryPolicy),
    },
  };
}

export interface RemovalGate {
  /** `held`: the removal worker takes no job. */
  state: 'run' | 'held';
  /** Runs although not durable, because ALLOW_VOLATILE_REDIS=1 says so. */
  volatileAllowed: boolean;
  verdict: DurabilityVerdict;
}

export function decideRemovalGate(verdict: DurabilityVerdict, allowVolatile: boolean): RemovalGate {
  if (verdict.durable) return { state: 'run', volatileAllowed: false, verdict };
  return { state: allowVolatile ? 'run' : 'held', volatileAllowed: allowVolatile, verdict };
}

const CONFIGURE_REDIS = 'configure Redis with `appendonly yes`, `appendfsync everysec` (or always) and `maxmemory-policy noeviction`';

export const DURABILITY_FIX = `${CONFIGURE_REDIS}, or set ALLOW_VOLATILE_REDIS=1 to accept that removals may be lost (see docs/removals.md, "Redis for the removal queue")`;

/** The same fix, said of webhooks (a daemon without removals has only those on Redis to hold). */
const WEBHOOK_DURABILITY_FIX = `${CONFIGURE_REDIS}, or set ALLOW_VOLATILE_REDIS=1 to accept that queued deliveries may be lost (see docs/changes.md, "Push: webhooks")`;

/** Why webhooks are held on this Redis, for logs, /readyz and status; undefined when they run. */
export function describeHeldWebhooks(gate: RemovalGate): string | undefined {
  return gate.state === 'held' ? `held: ${gate.verdict.reasons.join('; ')}; ${WEBHOOK_DURABILITY_FIX}` : undefined;
}

/** One line for logs, /readyz and status. */
export function describeRemovalGate(gate: RemovalGate): string {
  const why = gate.verdict.reasons.join('; ');
  if (gate.state === 'held') return `held: ${why}; ${DURABILITY_FIX}`;
  if (gate.volatileAllowed) return `running on a volatile Redis (ALLOW_VOLATILE_REDIS=1): ${why}`;
  return 'ok';
}

/** `INFO` text → field map (`# Section` headers and blank lines skipped). */
export function parseRedisInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    if (line === '' || line.startsWith('#')) continue;
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** Facts from the two INFO sections plus whatever CONFIG GET answered (a flat name/value list, or undefined). */
export function durabilityFactsFrom(
  info: Map<string, string>,
  config: Map<string, string> | undefined,
  readError?: string,
): RedisDurabilityFacts {
  const aof = info.get('aof_enabled');
  return {
    aofEnabled: aof === undefined ? undefined : aof === '1',
    appendfsync: config?.get('appendfsync'),
    maxmemoryPolicy: info.get('maxmemory_policy') ?? config?.get('maxmemory-policy'),
    readError,
  };
}

/**
 * Reads what redis-durability.ts judges. INFO first: managed Redis services
 * (ElastiCache, Memorystore, Azure Cache) often refuse CONFIG but answer
 * INFO. CONFIG GET is asked only for what INFO does not carry (appendfsync)
 * and its refusal is not an error.
 */
async function readRedisDurability(redis: Redis): Promise<RedisDurabilityFacts> {
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
    masters.map(async (node) => ({
      node: `${node.options.host ?? '?'}:${node.options.port ?? '?'}`,
      facts: await readRedisDurability(node),
    })),
  );
  return judgeNodes(nodes);
}

/**
 * Start-up check for a removal worker: reads, decides, logs one line
 * (error when held, warn when running on a volatile Redis by permission).
 */
export async function checkRemovalGate(redis: RedisClient, allowVolatile: boolean, logger: Logger): Promise<RemovalGate> {
  const gate = decideRemovalGate(await readEstateDurability(redis), allowVolatile);
  logRemovalGate(gate, logger);
  return gate;
}

/** The removal worker's start-up line (and the verdict's warnings); only where removals run. */
export function logRemovalGate(gate: RemovalGate, logger: Logger): void {
  const fields = { event: 'removals.redis_durability', state: gate.state, ...gate.verdict.settings, reasons: gate.verdict.reasons };
  if (gate.state === 'held') {
    logger.error({ ...fields, fix: DURABILITY_FIX }, `removal worker not started: removals ${describeRemovalGate(gate)}`);
  } else if (gate.volatileAllowed) {
    logger.warn(fields, 'removal worker running on a Redis that can lose queued removals (ALLOW_VOLATILE_REDIS=1)');
  } else {
    logger.info(fields, 'redis keeps queued removals (AOF on, noeviction)');
  }
  for (const warning of gate.verdict.warnings) logger.warn({ event: 'removals.redis_durability_warning' }, warning);
}
