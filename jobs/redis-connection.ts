/**
 * Where the queues live, and the ioredis connections to it.
 *
 * Three topologies (docs/removals.md, "Redis in a production estate"):
 * - `single`: `REDIS_URL` (`redis://` or `rediss://`, credentials and db in the URL);
 * - `cluster`: `REDIS_CLUSTER_NODES=host:port,...`. BullMQ's scripts touch
 *   several keys of a queue at once and a cluster runs a script only when
 *   all its keys hash to one slot, so `QUEUE_PREFIX` must carry a hash tag
 *   (`{user-mirror}`): that is checked here, as a configuration error;
 * - `sentinel`: `REDIS_SENTINELS=host:port,...` and `REDIS_SENTINEL_NAME`;
 *   ioredis asks the sentinels for the master and follows a failover.
 * Cluster and Sentinel take `REDIS_USERNAME`, `REDIS_PASSWORD` and
 * `REDIS_TLS=1` (plus `REDIS_SENTINEL_PASSWORD` for the sentinels).
 * With TLS on (either way), `REDIS_TLS_CA_FILE`, `REDIS_TLS_CERT_FILE` with
 * `REDIS_TLS_KEY(_FILE)` and `REDIS_TLS_SERVERNAME` give the CA, the client
 * certificate and the name to verify (docs/removals.md, "TLS").
 *
 * Roles:
 * - `worker`: `maxRetriesPerRequest: null` (BullMQ requires it for blocking
 *   commands) and reconnects forever: a worker outlives Redis restarts.
 * - `producer`: reconnects forever too (a producer inside an HTTP handler
 *   lives for months; giving up after a few reconnects stopped offboarding
 *   until a restart). An enqueue while Redis is away fails within
 *   PRODUCER_WAIT_MS with a RedisUnavailableError and sends nothing; the
 *   first one after Redis is back succeeds (removals/producer.ts).
 * - `control`: the daemon's own non-blocking connection (ticks, probes,
 *   scrapes): like a producer, no offline queue, reconnects forever.
 * - `probe`: one connection attempt, no reconnects (`status`): a command
 *   that reports an outage does not wait it out.
 * - `command`: a short CLI command's (jobs/command-redis.ts): like a
 *   producer, and every reply is waited for at most COMMAND_REPLY_MS.
 *
 * Reconnects back off exponentially with jitter. Endpoints are logged
 * without user names or passwords.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { ConfigError, ConfigPass, type Config, type EnvName } from '../src/runtime/config.js';
import type { HostPort } from '../src/runtime/config-schemas.js';
import { logError } from '../src/runtime/log-error.js';
import type { Logger } from 'pino';

export type RedisRole = 'worker' | 'producer' | 'control' | 'probe' | 'command';
/** What every queue module accepts: a single node (or a Sentinel-managed master) or a cluster. */
export type RedisClient = Redis | Cluster;

/** What TLS needs beyond "on": PEM texts as read at start-up, and the name to verify. */
export interface RedisTls {
  ca?: string;
  cert?: string;
  key?: string;
  servername?: string;
}

interface RedisAuth {
  username: string | undefined;
  password: string | undefined;
  tls: boolean;
  tlsOptions?: RedisTls;
}

export type RedisEndpoint =
  | { mode: 'single'; url: string; tls?: RedisTls }
  | { mode: 'cluster'; nodes: HostPort[]; auth: RedisAuth }
  | { mode: 'sentinel'; sentinels: HostPort[]; name: string; sentinelPassword: string | undefined; auth: RedisAuth };

/** The endpoint plus the key prefix: together they name where the queues are. */
export interface QueueSettings {
  endpoint: RedisEndpoint;
  prefix: string;
}

const REDIS_ENV = [
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_NAME',
  'REDIS_USERNAME',
  'REDIS_PASSWORD',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_TLS',
  'REDIS_TLS_CA_FILE',
  'REDIS_TLS_CERT_FILE',
  'REDIS_TLS_KEY',
  'REDIS_TLS_SERVERNAME',
] as const;
export const QUEUE_ENV = [...REDIS_ENV, 'QUEUE_PREFIX'] as const;
export type QueueConfig = Config<(typeof QUEUE_ENV)[number]>;

const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
const HASH_TAG = /\{[^{}]+\}/;

/** Checks the combination the per-variable schemas cannot see; every problem at once, by name. */
export function queueSettingsFromConfig(config: QueueConfig): QueueSettings {
  const problems: string[] = [];
  const modes = [
    config.REDIS_URL !== undefined && 'REDIS_URL',
    config.REDIS_CLUSTER_NODES !== undefined && 'REDIS_CLUSTER_NODES',
    config.REDIS_SENTINELS !== undefined && 'REDIS_SENTINELS',
  ].filter((m): m is string => m !== false);
  if (modes.length > 1) problems.push(`${modes.join(', ')}: set only one of them (a single node, a cluster or a Sentinel set)`);
  if (config.REDIS_SENTINELS !== undefined && config.REDIS_SENTINEL_NAME === undefined) {
    problems.push('REDIS_SENTINEL_NAME: is required with REDIS_SENTINELS (the name the sentinels monitor the master under)');
  }
  if (config.REDIS_SENTINEL_NAME !== undefined && config.REDIS_SENTINELS === undefined) {
    problems.push('REDIS_SENTINEL_NAME: only with REDIS_SENTINELS');
  }
  if (config.REDIS_CLUSTER_NODES !== undefined && !HASH_TAG.test(config.QUEUE_PREFIX)) {
    problems.push(
      `QUEUE_PREFIX: on a Redis Cluster must contain a hash tag, e.g. {${config.QUEUE_PREFIX}}: ` +
        "BullMQ's scripts use several keys of a queue at once, and a cluster runs a script only when all its keys are in one slot",
    );
  }
  const single = config.REDIS_CLUSTER_NODES === undefined && config.REDIS_SENTINELS === undefined;
  for (const name of ['REDIS_USERNAME', 'REDIS_PASSWORD', 'REDIS_SENTINEL_PASSWORD'] as const) {
    if (single && config[name] !== undefined)
      problems.push(`${name}: only with REDIS_CLUSTER_NODES or REDIS_SENTINELS (a single node takes them in REDIS_URL)`);
  }
  if (single && config.REDIS_TLS)
    problems.push('REDIS_TLS: only with REDIS_CLUSTER_NODES or REDIS_SENTINELS (a single node uses rediss:// in REDIS_URL)');
  const tlsOn = single ? (config.REDIS_URL ?? DEFAULT_REDIS_URL).startsWith('rediss:') : config.REDIS_TLS;
  const tlsGiven = (['REDIS_TLS_CA_FILE', 'REDIS_TLS_CERT_FILE', 'REDIS_TLS_KEY', 'REDIS_TLS_SERVERNAME'] as const).filter(
    (name) => config[name] !== undefined,
  );
  if (!tlsOn && tlsGiven.length > 0) {
    problems.push(`${tlsGiven.join(', ')}: only with TLS on (a rediss:// REDIS_URL, or REDIS_TLS=1 for cluster and Sentinel)`);
  }
  if ((config.REDIS_TLS_CERT_FILE === undefined) !== (config.REDIS_TLS_KEY === undefined)) {
    problems.push('REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE: a client certificate needs its key, and a key its certificate; set both');
  }
  if (problems.length > 0) throw new ConfigError(problems);

  const tls = tlsOptionsOf(config);
  const auth: RedisAuth = {
    username: config.REDIS_USERNAME,
    password: config.REDIS_PASSWORD,
    tls: config.REDIS_TLS,
    ...(tls === undefined ? {} : { tlsOptions: tls }),
  };
  const endpoint: RedisEndpoint =
    config.REDIS_CLUSTER_NODES !== undefined
      ? { mode: 'cluster', nodes: config.REDIS_CLUSTER_NODES, auth }
      : config.REDIS_SENTINELS !== undefined
        ? {
            mode: 'sentinel',
            sentinels: config.REDIS_SENTINELS,
            name: config.REDIS_SENTINEL_NAME ?? '',
            sentinelPassword: config.REDIS_SENTINEL_PASSWORD,
            auth,
          }
        : { mode: 'single', url: config.REDIS_URL ?? DEFAULT_REDIS_URL, ...(tls === undefined ? {} : { tls }) };
  return { endpoint, prefix: config.QUEUE_PREFIX };
}

/** The TLS files and name given, or undefined when none is (TLS, if on, uses the system's CAs). */
function tlsOptionsOf(config: QueueConfig): RedisTls | undefined {
  const tls: RedisTls = {};
  if (config.REDIS_TLS_CA_FILE !== undefined) tls.ca = config.REDIS_TLS_CA_FILE;
  if (config.REDIS_TLS_CERT_FILE !== undefined) tls.cert = config.REDIS_TLS_CERT_FILE;
  if (config.REDIS_TLS_KEY !== undefined) tls.key = config.REDIS_TLS_KEY;
  if (config.REDIS_TLS_SERVERNAME !== undefined) tls.servername = config.REDIS_TLS_SERVERNAME;
  return Object.keys(tls).length > 0 ? tls : undefined;
}

/**
 * Reads and checks the queue variables from `env`: the producer library's call (src/producer.ts). Its
 * process and environment are its host's, so a REDIS_URL with a password is taken by value there; the
 * CLI's commands (readWithQueueSettings) refuse one (src/runtime/url-secrets.ts).
 */
export function readQueueSettings(env: NodeJS.ProcessEnv = process.env): QueueSettings {
  const pass = new ConfigPass<(typeof QUEUE_ENV)[number]>(QUEUE_ENV, env, undefined, 'allow');
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  return queueSettingsFromConfig(pass.done());
}

/**
 * A command's variables and the queue's in one ConfigPass, the combination
 * check (queueSettingsFromConfig) included: a bad REDIS_URL, a Cluster
 * prefix without a hash tag and a missing MANAGEMENT_URL are reported in
 * one ConfigError, not one per attempt. QUEUE_ENV's problems come first;
 * `checks` adds the command's own checks across variables to the pass.
 */
export function readWithQueueSettings<K extends EnvName>(
  names: readonly K[],
  env: NodeJS.ProcessEnv = process.env,
  checks: (pass: ConfigPass<K | (typeof QUEUE_ENV)[number]>) => void = () => undefined,
): { config: Config<K | (typeof QUEUE_ENV)[number]>; queue: QueueSettings } {
  const pass = new ConfigPass<K | (typeof QUEUE_ENV)[number]>([...QUEUE_ENV, ...names], env);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  checks(pass);
  const config = pass.done();
  // Cannot throw now: the same check passed inside the pass.
  return { config, queue: queueSettingsFromConfig(config) };
}

/** Reconnect delays: 100 ms doubling to 5 s, with jitter so a fleet does not reconnect in lockstep. */
export function reconnectDelay(times: number, random: () => number = Math.random): number {
  const exp = Math.min(5_000, 100 * 2 ** Math.max(0, times - 1));
  return Math.round(exp / 2 + random() * (exp / 2));
}

const forever = (times: number): number => reconnectDelay(times);

/**
 * How long a command (role `command`) waits for one reply: a server that took the connection and
 * then stopped answering (SIGSTOP, a hung proxy) fails the command instead of holding it for ever.
 * Generous, since no reply of a short command takes a healthy Redis more than milliseconds.
 */
const COMMAND_REPLY_MS = 15_000;

const ROLE_OPTIONS: Record<RedisRole, RedisOptions> = {
  worker: { maxRetriesPerRequest: null, retryStrategy: forever },
  // The offline queue stays on, so commands sent before the first connect wait for it; the enqueue
  // itself checks the connection first (removals/producer.ts) and sends nothing while Redis is away.
  producer: { maxRetriesPerRequest: 1, retryStrategy: forever },
  control: { enableOfflineQueue: false, maxRetriesPerRequest: 1, retryStrategy: forever },
  probe: { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null },
  // A command that is done does not wait ioredis's 2 s for a socket that failed (or a server that went quiet) to close.
  command: { maxRetriesPerRequest: 1, retryStrategy: forever, commandTimeout: COMMAND_REPLY_MS, disconnectTimeout: 100 },
};

export interface RedisConnectionOptions {
  role: RedisRole;
  logger?: Logger;
  /** Shown in `CLIENT LIST`, handy when several processes share a Redis. */
  connectionName?: string;
}

/** A connection in `role` to `endpoint` (a URL string means a single node). */
export function createRedisConnection(endpoint: RedisEndpoint | string, options: RedisConnectionOptions): RedisClient {
  const target: RedisEndpoint = typeof endpoint === 'string' ? { mode: 'single', url: endpoint } : endpoint;
  const role = ROLE_OPTIONS[options.role];
  const base: RedisOptions = { connectionName: options.connectionName, connectTimeout: 10_000, ...role };
  let client: RedisClient;
  if (target.mode === 'single') {
    // A rediss:// URL turns TLS on; options given here replace ioredis's `tls: true` with the CA, certificate and name.
    client = new Redis(target.url, target.tls === undefined ? base : { ...base, tls: target.tls });
  } else if (target.mode === 'sentinel') {
    client = new Redis({
      ...base,
      ...authOptions(target.auth),
      sentinels: target.sentinels,
      name: target.name,
      sentinelPassword: target.sentinelPassword,
      enableTLSForSentinelMode: target.auth.tls,
      // A failover is followed through the connection: the dead master's socket closes and the
      // reconnect asks the sentinels again; a demoted master that stays up answers writes with
      // READONLY, which reconnects (and resends). Not ioredis's failoverDetector: a +switch-master
      // that arrives while a reconnect is asking the sentinels ends the client for good (seen
      // under load in test/redis-sentinel.test.ts: "Connection is closed." until restart).
      reconnectOnError: (err: Error) => (err.message.startsWith('READONLY') ? 2 : false),
    });
  } else {
    const { retryStrategy, enableOfflineQueue, ...perNode } = base;
    const clusterOptions: ClusterOptions = {
      redisOptions: { ...perNode, ...authOptions(target.auth) },
      clusterRetryStrategy: (times: number) => (retryStrategy ? (retryStrategy(times) ?? null) : forever(times)),
      enableOfflineQueue: enableOfflineQueue ?? true,
      // Workers keep redirecting through a resharding or a failover of one master.
      maxRedirections: 32,
    };
    client = new Cluster(target.nodes, clusterOptions);
  }
  watchOutages(client, describeRedis(target), options.logger);
  return client;
}

function authOptions(auth: RedisAuth): RedisOptions {
  return { username: auth.username, password: auth.password, ...(auth.tls ? { tls: { ...auth.tlsOptions } } : {}) };
}

/** One line per outage, not one per reconnect attempt; one that starts before the first connection says it never had one. */
function watchOutages(client: RedisClient, where: string, logger: Logger | undefined): void {
  let down = false;
  let connected = false;
  client.on('error', (err: Error) => {
    if (down) return;
    down = true;
    const failure = redisFailureOf(err.message);
    if (logger !== undefined)
      logError(
        logger,
        'warn',
        { redis: where, failure, err },
        connected ? `redis connection lost (${failure}); reconnecting` : `redis not connected (${failure}); retrying`,
      );
  });
  client.on('ready', () => {
    connected = true;
    if (!down) return;
    down = false;
    logger?.info({ redis: where }, 'redis connection restored');
  });
}

/** For logs and status: never a user name or password. */
export function describeRedis(endpoint: RedisEndpoint | string): string {
  const target: RedisEndpoint = typeof endpoint === 'string' ? { mode: 'single', url: endpoint } : endpoint;
  const list = (nodes: HostPort[]) => nodes.map((n) => `${n.host}:${n.port}`).join(',');
  if (target.mode === 'single') return describeRedisUrl(target.url);
  const scheme = target.auth.tls ? 'rediss' : 'redis';
  if (target.mode === 'cluster') return `${scheme} cluster ${list(target.nodes)}`;
  return `${scheme} sentinel ${target.name} via ${list(target.sentinels)}`;
}

/** `rediss://user:secret@host:6380/2` -> `rediss://host:6380/2`. */
export function describeRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    const db = u.pathname.replace(/^\/+/, '');
    return `${u.protocol}//${u.hostname}${u.port ? `:${u.port}` : ''}${db ? `/${db}` : ''}`;
  } catch {
    return '(invalid redis url)';
  }
}

/**
 * Why Redis could not be used, the three an operator acts on differently: nothing answers the
 * connection (`unreachable`: down, wrong host or port, a network in between), it answers but
 * refuses these credentials (`refused`: NOAUTH, WRONGPASS, an ACL that forbids), or it accepted the
 * connection and then said nothing (`timed out`: a stopped or overloaded server, a proxy that hangs).
 */
export type RedisFailure = 'unreachable' | 'refused' | 'timed out';

const REFUSED = /\b(NOAUTH|WRONGPASS|NOPERM)\b|invalid password|invalid username|AUTH failed/i;
const TIMED_OUT = /Command timed out|timed out|ETIMEDOUT/i;

/** The failure an ioredis error (or the lack of one: `undefined`) stands for. */
export function redisFailureOf(message: string | undefined): RedisFailure {
  if (message === undefined) return 'timed out';
  if (REFUSED.test(message)) return 'refused';
  return TIMED_OUT.test(message) ? 'timed out' : 'unreachable';
}

/** ioredis's words for "no connection now" (offline queue off, connection closed, retries spent, no reply in time). */
export function isRedisConnectionError(err: unknown): err is Error {
  return (
    err instanceof Error &&
    !(err instanceof RedisUnavailableError) &&
    /Stream isn't writeable|Connection is closed|max retries per request|ECONNREFUSED|ETIMEDOUT|Cluster isn't ready|Command timed out|\bNOAUTH\b|\bWRONGPASS\b/i.test(
      err.message,
    )
  );
}

/**
 * Resolves once `client` is ready, or rejects with a RedisUnavailableError naming the failure: at
 * once when Redis refuses the credentials (waiting will not change them), else after `ms` with what
 * the connection last saw.
 */
export function redisReady(client: RedisClient, ms: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    let last: string | undefined;
    const onError = (err: Error): void => {
      last = err.message;
      if (redisFailureOf(last) === 'refused') done(new RedisUnavailableError(last, false, 'refused'));
    };
    const done = (err?: Error): void => {
      clearTimeout(timer);
      client.off('ready', onReady);
      client.off('error', onError);
      client.off('end', onEnd);
      if (err === undefined) resolve();
      else reject(err);
    };
    const onReady = (): void => done();
    // A connection that will not try again (a probe) has answered already.
    const onEnd = (): void => done(new RedisUnavailableError(last ?? 'connection closed', false, redisFailureOf(last ?? '')));
    // 'connect': the socket is open and the handshake unanswered (a stopped server); else no socket yet, whatever
    // was said before this wait began (a client reconnecting through an outage).
    const timer = setTimeout(() => {
      const quiet = last === undefined && client.status === 'connect';
      done(
        quiet
          ? new RedisUnavailableError(`no answer within ${ms} ms (the connection was accepted but Redis said nothing)`, false, 'timed out')
          : new RedisUnavailableError(`not connected within ${ms} ms (${last ?? 'not connected'})`, false, redisFailureOf(last ?? '')),
      );
    }, ms);
    client.on('ready', onReady);
    client.on('error', onError);
    client.once('end', onEnd);
    if (client.status === 'wait') client.connect().catch(() => undefined);
  });
}

const FAILURE_WORDS: Record<RedisFailure, string> = {
  unreachable: 'Redis is unreachable',
  refused: 'Redis refused the connection',
  'timed out': 'Redis timed out',
};

/**
 * Redis could not be used; `failure` says why (RedisFailure). `sent` says
 * whether the command had left: false means it certainly did not happen;
 * true means the connection broke while it was in flight, so it may have
 * happened (a retried enqueue is safe: requests for a pending removal
 * collapse into it).
 */
export class RedisUnavailableError extends Error {
  override name = 'RedisUnavailableError';
  constructor(
    readonly detail: string,
    readonly sent = false,
    readonly failure: RedisFailure = 'unreachable',
  ) {
    super(`${FAILURE_WORDS[failure]}: ${detail}`);
  }
}
