/**
 * Configuration: one zod schema per environment variable, one registry of
 * them all. A command asks only for the variables it needs (`readConfig`),
 * so an offline resolve never demands a key. All problems are reported at
 * once, by name; values are never echoed, because some of them are secrets.
 */
import { hostname } from 'node:os';
import { z } from 'zod';
import { FILE_SECRETS, isFileSecret, readSecretSource, secretGiven } from './secret-files.js';
import {
  httpUrl,
  secret,
  positiveInt,
  nonNegativeInt,
  days,
  headerName,
  flag,
  cronExpression,
  hostPortList,
  pemFile,
} from './config-schemas.js';
import { redisUrlPasswordAt, urlPasswordProblem } from './url-secrets.js';
import { clearTextUrlProblem } from './clear-text.js';

/** The registry. Add a variable here, in the same style, and nowhere else. */
export const ENV = {
  SERVICE_BASE_URL: httpUrl,
  SERVICE_API_KEY: secret,
  SERVICE_API_KEY_HEADER: headerName.default('x-service-api-key'),
  // The CA(s) that signed SERVICE_BASE_URL's certificate when it is private (a follower's leader replica, docs/followers.md).
  SERVICE_CA_FILE: pemFile('CERTIFICATE').optional(),
  // 1: a TLS proxy (or a mesh that encrypts) carries this process's plain http: beyond loopback (src/runtime/clear-text.ts).
  TLS_BY_PROXY: flag,
  MANAGEMENT_URL: httpUrl,
  MANAGEMENT_KEY: secret,
  // A single node; unset (and no cluster or sentinels): redis://127.0.0.1:6379. See jobs/redis-connection.ts.
  REDIS_URL: z.url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' }).optional(),
  REDIS_CLUSTER_NODES: hostPortList.optional(),
  REDIS_SENTINELS: hostPortList.optional(),
  REDIS_SENTINEL_NAME: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, _ . and - only')
    .optional(),
  // Credentials and TLS for cluster and sentinel nodes (a single node carries them in REDIS_URL).
  REDIS_USERNAME: z
    .string()
    .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII with no spaces')
    .optional(),
  REDIS_PASSWORD: secret.optional(),
  REDIS_SENTINEL_PASSWORD: secret.optional(),
  REDIS_TLS: flag,
  // TLS to Redis with a private CA, a client certificate (Redis's tls-auth-clients), a server name; see docs/removals.md.
  REDIS_TLS_CA_FILE: pemFile('CERTIFICATE').optional(),
  REDIS_TLS_CERT_FILE: pemFile('CERTIFICATE').optional(),
  // The client certificate's key: a secret, so it comes as REDIS_TLS_KEY_FILE (or the credential REDIS_TLS_KEY).
  REDIS_TLS_KEY: z
    .string()
    .refine((pem) => /-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem), 'must be a PEM private key')
    .optional(),
  REDIS_TLS_SERVERNAME: z
    .string()
    .regex(/^[A-Za-z0-9*.-]+$/, 'must be a host name')
    .optional(),
  // The operator accepts that a Redis without AOF, or one that may evict keys, can lose queued removals.
  ALLOW_VOLATILE_REDIS: flag,
  // A Redis Cluster needs a hash tag in it, e.g. {user-mirror} (checked with the rest of the Redis settings).
  QUEUE_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]*(\{[A-Za-z0-9_-]+\})?[A-Za-z0-9_-]*$/, 'letters, digits, _ and - only, with at most one {hash tag}')
    .default('user-mirror'),
  MIRROR_DB: z.string().min(1).default('./data/mirror.db'),
  // A group whose members may read the mirror and audit (files 0640, folder 02750); unset: this account only (0600, 0700).
  MIRROR_GROUP: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_.-]*$|^\d+$/, 'must be a group name or a numeric gid')
    .optional(),
  // A WAL above this is a problem `status` reports (exit 1); unset: half the mirror's size, at least 64 MiB.
  MIRROR_WAL_WARN_BYTES: z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
  // Free space on MIRROR_DB's file system below this makes `status` exit 1 before the disk is full (1 GiB).
  MIRROR_DISK_WARN_BYTES: z.coerce
    .number()
    .int()
    .min(0)
    .max(Number.MAX_SAFE_INTEGER)
    .default(1024 * 1024 * 1024),
  // Who checkpoints the mirror's WAL: `after-sync` (this project, after each sync run) or `external` (a replicator
  // such as Litestream, which must own every checkpoint: user-mirror then never checkpoints; docs/operations.md).
  MIRROR_CHECKPOINTS: z.enum(['after-sync', 'external'], { error: 'must be after-sync or external' }).default('after-sync'),
  // The removal audit's own file; unset: next to MIRROR_DB (see db/audit-location.ts).
  AUDIT_DB: z.string().min(1).optional(),
  MIRROR_ID: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, _ . and - only')
    .default(hostname().replace(/[^A-Za-z0-9_.-]/g, '-')),
  SYNC_CRON: cronExpression.default('*/15 * * * *'),
  SYNC_CONCURRENCY: positiveInt(4, 64),
  SYNC_MAX_DELETE_RATIO: z.coerce.number().min(0).max(1).default(0.1),
  SYNC_PAGE_ATTEMPTS: positiveInt(5, 100),
  // How long one page (or check) may keep trying, from its first attempt: no attempt starts later. 0: attempts only.
  SYNC_PAGE_RETRY_BUDGET_MS: nonNegativeInt(120_000, 3_600_000),
  // A run still going after this fails and publishes nothing. 1M users: 25 min even at 3 s a page (concurrency 4); 2 h is far beyond a healthy run.
  SYNC_MAX_DURATION_MS: positiveInt(7_200_000, 7 * 24 * 3_600_000),
  // A page of 500 typical users is ~0.4 MB; a bigger body than this is dropped while it is read, so memory stays bounded.
  SYNC_MAX_PAGE_BYTES: positiveInt(32 * 1024 * 1024, 1024 * 1024 * 1024),
  // A user record above this is not stored; it is set aside in rejected_records (without its content).
  SYNC_MAX_RECORD_BYTES: positiveInt(1024 * 1024, 256 * 1024 * 1024),
  // A resolve answer is one record (~1 KB): a bigger one fails its check, so SYNC_VERIFY_CONCURRENCY checks hold at most this much each.
  SYNC_MAX_RESOLVE_BYTES: positiveInt(256 * 1024, 256 * 1024 * 1024),
  // Deletion candidates checked upstream per run; the rest wait for a later run.
  SYNC_MAX_VERIFY: nonNegativeInt(5_000, 1_000_000),
  // A follower (SERVICE_BASE_URL another mirror's replica, docs/followers.md) publishes nothing from a leader whose data is older.
  SYNC_LEADER_MAX_AGE_MS: positiveInt(1_800_000, 90 * 24 * 3_600_000),
  // This mirror follows a leader mirror's replica (docs/followers.md): each run pins the leader and its team and checks
  // every answer against them. Explicit, never inferred: unset, an answer from a replica (x-mirror-* headers) is refused.
  SYNC_FOLLOW_LEADER: flag,
  // A follower's team (the service's team_id); unset: the team of the mirror's own users, or of the leader's first record.
  SYNC_FOLLOW_TEAM: z.guid({ error: 'must be a team id (UUID)' }).optional(),
  // Deletion checks in flight. They run inside the run's write transaction (a run publishes whole), so every
  // check waiting on a slow service holds the mirror's write lock longer: more in flight, shorter hold.
  SYNC_VERIFY_CONCURRENCY: positiveInt(16, 256),
  // How long `resolve --online` waits for the mirror's write lock (a sync publishing) to store its answer; 0: not at all.
  RESOLVE_WRITE_WAIT_MS: nonNegativeInt(30_000, 600_000),
  // Age of the last succeeded sync beyond which the mirror is reported stale; unset: three SYNC_CRON intervals.
  SYNC_STALE_AFTER_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .max(90 * 24 * 3_600_000)
    .optional(),
  HTTP_CONNECTIONS: positiveInt(8, 256),
  HTTP_HEADERS_TIMEOUT_MS: positiveInt(30_000, 600_000),
  HTTP_BODY_TIMEOUT_MS: positiveInt(60_000, 600_000),
  // Headers and the whole body of one request: the body timeout is only an idle gap, which a trickle never trips.
  // 60 s: two attempts of a stuck page fit SYNC_PAGE_RETRY_BUDGET_MS (a 0.4 MB page needs 7 KB/s).
  HTTP_REQUEST_TIMEOUT_MS: positiveInt(60_000, 3_600_000),
  REMOVAL_CONCURRENCY: positiveInt(8, 256),
  REMOVAL_ATTEMPTS: positiveInt(10, 1000),
  REMOVAL_BACKOFF_MS: positiveInt(1_000, 3_600_000),
  // How long a crashed removal worker holds its jobs before another worker takes them over.
  REMOVAL_LOCK_MS: positiveInt(30_000, 600_000),
  SHUTDOWN_TIMEOUT_MS: positiveInt(25_000, 600_000),
  // The daemon's worker watchdog: how often it looks, and how long jobs may wait with none active before a restart.
  WATCHDOG_INTERVAL_MS: positiveInt(15_000, 600_000),
  WATCHDOG_STALL_MS: positiveInt(120_000, 3_600_000),
  STATUS_PORT: nonNegativeInt(9464, 65535),
  STATUS_HOST: z.string().min(1).default('127.0.0.1'),
  // The replica (src/replica): `serve` listens on 8788 when unset; the daemon serves one only when it is set.
  REPLICA_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  REPLICA_HOST: z.string().min(1).default('127.0.0.1'),
  // The replica's own TLS: its certificate chain and key as files, read again when they change (src/replica/tls.ts).
  REPLICA_TLS_CERT_FILE: z.string().min(1).optional(),
  REPLICA_TLS_KEY_FILE: z.string().min(1).optional(),
  // `serve` only: processes sharing the port (node:cluster), one per core the replica may use.
  REPLICA_WORKERS: positiveInt(1, 64),
  // Required by the daemon's replica; `serve` generates one (printed once) when unset. Never the service's key.
  REPLICA_API_KEY: secret.optional(),
  // Unset: SERVICE_API_KEY_HEADER's value and the official SDK's x-vital-api-key, so a client of the service changes only its base URL and key.
  REPLICA_API_KEY_HEADER: headerName.optional(),
  // Past this age of the last succeeded sync, /readyz says 503 and answers carry a Warning header.
  REPLICA_MAX_STALENESS_S: positiveInt(3_600, 30 * 86_400),
  // Connections the replica holds at once; unset: its descriptor limit less a reserve, at most 4,096 (src/replica/settings.ts).
  REPLICA_MAX_CONNECTIONS: z.coerce.number().int().min(1).max(1_000_000).optional(),
  // A request's headers must arrive within this of its start; an idle keep-alive connection is closed after the other.
  REPLICA_HEADERS_TIMEOUT_MS: positiveInt(10_000, 300_000),
  REPLICA_IDLE_TIMEOUT_MS: positiveInt(5_000, 300_000),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  // The change feed (db/change-feed.ts): a first sync's events, and how long events are kept.
  CHANGES_BASELINE: z.enum(['marker', 'events'], { error: 'must be marker or events' }).default('marker'),
  CHANGES_RETENTION_DAYS: days(30, 1 / 1_440, 3_650),
  // Users the service confirmed deleted are kept (flagged) this long, then purged after a sync; 0: kept for ever.
  DELETED_RETENTION_DAYS: days(90, 0, 36_500),
  // user_changes and rejected_records rows (the runs' detail) are dropped after this; 0: kept for ever.
  CHANGE_LOG_RETENTION_DAYS: days(365, 0, 36_500),
  // History (db/history.ts): versions and connections that ended longer ago than this are dropped; 0: kept for ever.
  HISTORY_RETENTION_DAYS: days(0, 0, 36_500),
  // Webhooks (jobs/webhooks/): every event POSTed here, signed per Standard Webhooks.
  WEBHOOK_URL: httpUrl.optional(),
  WEBHOOK_SECRET: z
    .string()
    .regex(
      /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/,
      "must be whsec_ followed by a base64 key of at least 12 bytes (make one with 'user-mirror webhooks new-secret')",
    )
    .optional(),
  WEBHOOK_TIMEOUT_MS: positiveInt(15_000, 300_000),
  // Sinks (src/sinks, docs/sinks.md): a JSON file of Redis Streams, JetStream and webhook destinations of the change feed.
  SINKS_FILE: z.string().min(1).optional(),
  // Scheduled backups (`user-mirror backup`, docs/operations.md): the folder (unset: none), when (UTC), how many of each file kept.
  BACKUP_DIR: z.string().min(1).optional(),
  BACKUP_CRON: cronExpression.default('7 * * * *'),
  BACKUP_KEEP: positiveInt(24, 100_000),
  // Scheduled exports for a lake (docs/export.md): the folder, when, how many kept.
  EXPORT_DIR: z.string().min(1).optional(),
  EXPORT_CRON: cronExpression.default('17 3 * * *'),
  EXPORT_KEEP: positiveInt(30, 100_000),
  EXPORT_POLICY: z.string().min(1).optional(),
  // Webhook delivery this far behind (the oldest event not yet delivered, in seconds) needs an operator: status exits 1.
  WEBHOOK_LAG_WARN_SECONDS: positiveInt(300, 30 * 86_400),
} as const;

export type EnvName = keyof typeof ENV;
export type Config<K extends EnvName> = { [P in K]: z.output<(typeof ENV)[P]> };

/**
 * The URLs that carry health data or a key. A pass that reads TLS_BY_PROXY (every command that sends
 * to them does) refuses those it read that are plain http: beyond loopback, unless TLS_BY_PROXY is on.
 */
const CLEAR_TEXT_CARRIERS = ['SERVICE_BASE_URL', 'MANAGEMENT_URL', 'WEBHOOK_URL'] as const satisfies readonly EnvName[];

/** Variables whose values must never be printed. */
export const SECRET_ENV: ReadonlySet<EnvName> = new Set<EnvName>(FILE_SECRETS);

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

/** A warning about configuration (a key file others can read): one line on stderr, never a value. */
function warnOnStderr(line: string): void {
  process.stderr.write(`user-mirror: warning: ${line}\n`);
}

/**
 * Problems found before a command's own pass: MIRROR_GROUP, which the CLI
 * reads first because the file policy must be set before anything else
 * (runtime/file-policy.ts). The next pass reports them with its own.
 */
const carried: string[] = [];

export function carryIntoNextPass(problems: readonly string[]): void {
  carried.push(...problems);
}

/**
 * One configuration pass: reads and validates `names` from `env`, then runs
 * the checks across variables (a URL needs its secret, a cluster a hash tag)
 * that the caller adds, and the clear-text rule when `names` hold TLS_BY_PROXY
 * (CLEAR_TEXT_CARRIERS), and reports every problem in one ConfigError from
 * `done()`, a bad MIRROR_GROUP the CLI found before it included
 * (carryIntoNextPass). A command that read in steps would show its operator one round
 * of problems per attempt. Empty strings count as unset (env files often
 * carry `KEY=`); a secret may come from a file instead (secret-files.ts).
 */
export class ConfigPass<K extends EnvName> {
  private readonly values: Record<string, unknown> = {};
  private readonly problems: string[] = [];
  /** Variables with a problem of their own: a check across them would only repeat it. */
  private readonly invalid = new Set<EnvName>();

  /** `urlPasswords: 'allow'` only for the producer library, whose process and environment are its host's. */
  constructor(
    names: readonly K[],
    env: NodeJS.ProcessEnv = process.env,
    warn: (line: string) => void = warnOnStderr,
    private readonly urlPasswords: 'refuse' | 'allow' = 'refuse',
  ) {
    this.problems.push(...carried.splice(0));
    for (const name of names) this.read(name, env, warn);
  }

  private read(name: K, env: NodeJS.ProcessEnv, warn: (line: string) => void): void {
    let raw = env[name];
    let from: string = name;
    if (isFileSecret(name)) {
      const source = readSecretSource(name, env, warn);
      if (!source.ok) {
        this.fail(name, source.problem);
        return;
      }
      raw = source.value;
      from = source.from;
    }
    const result = ENV[name].safeParse(raw === '' ? undefined : raw);
    if (result.success) {
      const passwordAt = name === 'REDIS_URL' && from === name && raw !== undefined ? redisUrlPasswordAt(raw) : undefined;
      if (passwordAt !== undefined && this.urlPasswords === 'refuse') this.fail(name, urlPasswordProblem(name, passwordAt));
      else this.values[name] = result.data;
      return;
    }
    const why = raw === undefined || raw === '' ? 'is required' : (result.error.issues[0]?.message ?? 'is invalid');
    this.fail(name, from === name ? `${name}: ${why}` : `${name} (from ${from}): ${why}`);
  }

  private fail(name: EnvName, problem: string): void {
    this.invalid.add(name);
    this.problems.push(problem);
  }

  /** A problem found outside the registry's schemas (a pair set by half), reported with the rest. */
  add(problem: string): void {
    this.problems.push(problem);
  }

  /**
   * A check across variables (it throws a ConfigError, as the settings builders do), run only when
   * each of `names` is valid on its own; any other variable it reads may be absent. Its problems are
   * kept for `done()`; returns the check's value.
   */
  check<N extends K, T>(names: readonly N[], fn: (config: Config<N> & Partial<Config<K>>) => T): T | undefined {
    if (names.some((n) => this.invalid.has(n))) return undefined;
    try {
      return fn(this.values as Config<N> & Partial<Config<K>>);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      this.problems.push(...err.problems);
      return undefined;
    }
  }

  /** The configuration, or one ConfigError listing every problem found. */
  done(): Config<K> {
    if (this.values.TLS_BY_PROXY === false) {
      for (const name of CLEAR_TEXT_CARRIERS) {
        const url = this.values[name];
        const problem = typeof url === 'string' ? clearTextUrlProblem(url) : undefined;
        if (problem !== undefined) this.problems.push(`${name}: ${problem}`);
      }
    }
    if (this.problems.length > 0) throw new ConfigError(this.problems);
    return this.values as Config<K>;
  }
}

/** Reads and validates `names` from `env` (see ConfigPass). Throws one ConfigError listing every problem. */
export function readConfig<K extends EnvName>(
  names: readonly K[],
  env: NodeJS.ProcessEnv = process.env,
  warn: (line: string) => void = warnOnStderr,
): Config<K> {
  return new ConfigPass(names, env, warn).done();
}

/** Whether `name` is set at all: in `env`, or (a secret) as a file or systemd credential. */
export function isGiven(name: EnvName, env: NodeJS.ProcessEnv = process.env): boolean {
  return isFileSecret(name) ? secretGiven(name, env) : (env[name] ?? '') !== '';
}

// The variable sets commands ask for. Kept per command, composed from these shared sets, because
// each command reports the problems of what it reads only (one pass); the registry is the one list of names.
/** The undici client's bounds, for the service and the management service alike. */
export const HTTP_CLIENT_ENV = [
  'HTTP_CONNECTIONS',
  'HTTP_HEADERS_TIMEOUT_MS',
  'HTTP_BODY_TIMEOUT_MS',
  'HTTP_REQUEST_TIMEOUT_MS',
] as const satisfies readonly EnvName[];
export const SERVICE_ENV = [
  'SERVICE_BASE_URL',
  'SERVICE_API_KEY',
  'SERVICE_API_KEY_HEADER',
  'SERVICE_CA_FILE',
  'TLS_BY_PROXY',
  ...HTTP_CLIENT_ENV,
] as const satisfies readonly EnvName[];
export const MANAGEMENT_ENV = ['MANAGEMENT_URL', 'MANAGEMENT_KEY'] as const satisfies readonly EnvName[];
export const REPLICA_ENV = [
  'REPLICA_PORT',
  'REPLICA_HOST',
  'REPLICA_TLS_CERT_FILE',
  'REPLICA_TLS_KEY_FILE',
  'TLS_BY_PROXY',
  'REPLICA_API_KEY',
  'REPLICA_API_KEY_HEADER',
  'REPLICA_MAX_STALENESS_S',
  'REPLICA_MAX_CONNECTIONS',
  'REPLICA_HEADERS_TIMEOUT_MS',
  'REPLICA_IDLE_TIMEOUT_MS',
  'SERVICE_API_KEY_HEADER',
  'MIRROR_DB',
] as const satisfies readonly EnvName[];
