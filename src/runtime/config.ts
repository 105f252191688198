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

/**
 * The groups settings are shown in (`.env.example`, docs/configuration.md), in that order.
 * A group key is part of each setting's entry, so a setting cannot be left out of every group.
 */
export const SETTING_GROUPS = [
  ['service', 'The service (sync, resolve --online)'],
  ['clear-text', 'Nothing in clear beyond this host (docs/configuration.md)'],
  ['management', 'The management service (removals)'],
  ['redis', 'Redis: one of REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS'],
  ['files', 'Files and identity'],
  ['sync', 'Sync'],
  ['http', 'HTTP'],
  ['removals', 'Removal worker'],
  ['daemon', 'Daemon'],
  ['replica', 'Replica'],
  ['feed', 'Change feed and webhooks'],
  ['backups', 'Backups'],
  ['exports', 'Exports for a lake'],
] as const satisfies ReadonlyArray<readonly [string, string]>;
type SettingGroup = (typeof SETTING_GROUPS)[number][0];

/**
 * What else reads a setting beyond the command that names it: `leased-sync`, a sync run under the
 * mirror's lease (`sync --once` and the daemon's sync child, src/sync/exclusive-run.ts); `replica`,
 * the replica's settings (the daemon's replica and `serve`, and pm2's replica app).
 */
type SettingRole = 'leased-sync' | 'replica';

/** One setting: its schema, its group, one line for the operator, and who else reads it. */
interface Setting<S extends z.ZodType, R extends SettingRole> {
  schema: S;
  group: SettingGroup;
  about: string;
  roles: readonly R[];
}

function setting<S extends z.ZodType, const R extends SettingRole = never>(
  group: SettingGroup,
  schema: S,
  about: string,
  roles: readonly R[] = [],
): Setting<S, R> {
  return { schema, group, about, roles };
}

/**
 * The registry: every variable user-mirror reads. Add a variable here, and nowhere else: the
 * env-example, the leased-sync and replica lists and pm2's pass-through list (the build's
 * dist/settings.json, src/runtime/settings-manifest.ts) all derive from it.
 */
export const SETTINGS = {
  // --- The service (sync, resolve --online)
  SERVICE_BASE_URL: setting('service', httpUrl, "the service's base address ({base_url}); unset: `demo` uses the local stand-in"),
  SERVICE_API_KEY: setting('service', secret, 'team API key; sent only to SERVICE_BASE_URL'),
  SERVICE_API_KEY_HEADER: setting('service', headerName.default('x-service-api-key'), 'header carrying the team key', ['replica']),
  // The CA(s) that signed SERVICE_BASE_URL's certificate when it is private (a follower's leader replica, docs/followers.md).
  SERVICE_CA_FILE: setting(
    'service',
    pemFile('CERTIFICATE').optional(),
    "PEM file of the CA(s) that signed SERVICE_BASE_URL's certificate when it is private (a follower's leader replica); unset: the system's CAs",
  ),
  // --- Nothing in clear beyond this host (docs/configuration.md)
  // 1: a TLS proxy (or a mesh that encrypts) carries this process's plain http: beyond loopback (src/runtime/clear-text.ts).
  TLS_BY_PROXY: setting(
    'clear-text',
    flag,
    '1: a TLS proxy stands in front: accept a replica beyond loopback without its own TLS and plain http: service, management and webhook URLs to other hosts',
    ['replica'],
  ),
  // --- The management service (removals)
  MANAGEMENT_URL: setting(
    'management',
    httpUrl,
    "the management address ({management_url}); also names the removal queue's target; unset with MANAGEMENT_KEY: the daemon runs without removals",
  ),
  MANAGEMENT_KEY: setting('management', secret, 'management key (X-Management-Key); sent only to MANAGEMENT_URL'),
  // --- Redis: one of REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS
  // A single node; unset (and no cluster or sentinels): redis://127.0.0.1:6379. See jobs/redis-connection.ts.
  REDIS_URL: setting(
    'redis',
    z.url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' }).optional(),
    'a single node, redis:// or rediss:// (TLS); credentials and db in the URL',
  ),
  REDIS_CLUSTER_NODES: setting(
    'redis',
    hostPortList.optional(),
    'a Redis Cluster: host:port,host:port (needs a {hash tag} in QUEUE_PREFIX)',
  ),
  REDIS_SENTINELS: setting('redis', hostPortList.optional(), "Redis under Sentinel: the sentinels' host:port list"),
  REDIS_SENTINEL_NAME: setting(
    'redis',
    z
      .string()
      .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, _ . and - only')
      .optional(),
    "the master's name the sentinels monitor",
  ),
  // Credentials and TLS for cluster and sentinel nodes (a single node carries them in REDIS_URL).
  REDIS_USERNAME: setting(
    'redis',
    z
      .string()
      .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII with no spaces')
      .optional(),
    'user for cluster or Sentinel nodes',
  ),
  REDIS_PASSWORD: setting('redis', secret.optional(), 'password for cluster or Sentinel nodes'),
  REDIS_SENTINEL_PASSWORD: setting('redis', secret.optional(), "the sentinels' own password"),
  REDIS_TLS: setting('redis', flag, '1: TLS to cluster or Sentinel nodes (a single node: rediss:// in REDIS_URL)'),
  // TLS to Redis with a private CA, a client certificate (Redis's tls-auth-clients), a server name; see docs/removals.md.
  REDIS_TLS_CA_FILE: setting(
    'redis',
    pemFile('CERTIFICATE').optional(),
    "with TLS: PEM file of the CA(s) that signed Redis's certificate; unset: the system's CAs",
  ),
  REDIS_TLS_CERT_FILE: setting(
    'redis',
    pemFile('CERTIFICATE').optional(),
    "with TLS: PEM file of this client's certificate (Redis's tls-auth-clients); needs REDIS_TLS_KEY",
  ),
  // The client certificate's key: a secret, so it comes as REDIS_TLS_KEY_FILE (or the credential REDIS_TLS_KEY).
  REDIS_TLS_KEY: setting(
    'redis',
    z
      .string()
      .refine((pem) => /-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem), 'must be a PEM private key')
      .optional(),
    "with TLS: the client certificate's PEM private key",
  ),
  REDIS_TLS_SERVERNAME: setting(
    'redis',
    z
      .string()
      .regex(/^[A-Za-z0-9*.-]+$/, 'must be a host name')
      .optional(),
    "with TLS: the name Redis's certificate must carry when it is not the host connected to",
  ),
  // A Redis Cluster needs a hash tag in it, e.g. {user-mirror} (checked with the rest of the Redis settings).
  QUEUE_PREFIX: setting(
    'redis',
    z
      .string()
      .regex(/^[A-Za-z0-9_-]*(\{[A-Za-z0-9_-]+\})?[A-Za-z0-9_-]*$/, 'letters, digits, _ and - only, with at most one {hash tag}')
      .default('user-mirror'),
    'BullMQ key prefix; at most one {hash tag}',
  ),
  // The operator accepts that a Redis without AOF, or one that may evict keys, can lose queued removals.
  ALLOW_VOLATILE_REDIS: setting('redis', flag, '1: run removals on a Redis that can lose them (no AOF, or evicting)'),
  // --- Files and identity
  MIRROR_DB: setting('files', z.string().min(1).default('./data/mirror.db'), 'the SQLite mirror file', ['replica']),
  // The removal audit's own file; unset: next to MIRROR_DB (see db/audit-location.ts).
  AUDIT_DB: setting('files', z.string().min(1).optional(), "the removal audit's SQLite file; unset: next to MIRROR_DB"),
  // A group whose members may read the mirror and audit (files 0640, folder 02750); unset: this account only (0600, 0700).
  MIRROR_GROUP: setting(
    'files',
    z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_.-]*$|^\d+$/, 'must be a group name or a numeric gid')
      .optional(),
    'a group that may read the mirror and audit (files 0640); unset: this account only (0600)',
  ),
  MIRROR_ID: setting(
    'files',
    z
      .string()
      .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, _ . and - only')
      .default(hostname().replace(/[^A-Za-z0-9_.-]/g, '-')),
    "names this mirror's sync queue; unset: the host name",
  ),
  // A WAL above this is a problem `status` reports (exit 1); unset: half the mirror's size, at least 64 MiB.
  MIRROR_WAL_WARN_BYTES: setting(
    'files',
    z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
    'a mirror WAL above this makes status exit 1 (external checkpoints: its part not yet copied); unset: half the mirror, at least 64 MiB',
  ),
  // Free space on MIRROR_DB's file system below this makes `status` exit 1 before the disk is full (1 GiB).
  MIRROR_DISK_WARN_BYTES: setting(
    'files',
    z.coerce
      .number()
      .int()
      .min(0)
      .max(Number.MAX_SAFE_INTEGER)
      .default(1024 * 1024 * 1024),
    'free bytes on the file system holding MIRROR_DB below which status exits 1 (DISK LOW) before it is full; 0: only when full',
  ),
  // Who checkpoints the mirror's WAL: `after-sync` (this project, after each sync run) or `external` (a replicator
  // such as Litestream, which must own every checkpoint: user-mirror then never checkpoints; docs/backup.md, "Continuous replica with Litestream").
  MIRROR_CHECKPOINTS: setting(
    'files',
    z.enum(['after-sync', 'external'], { error: 'must be after-sync or external' }).default('after-sync'),
    'after-sync: user-mirror checkpoints the WAL after each sync; external: Litestream does (it must own them)',
    ['leased-sync'],
  ),
  // --- Sync
  SYNC_CRON: setting('sync', cronExpression.default('*/15 * * * *'), 'sync schedule, UTC (a 6th leading field is seconds)'),
  SYNC_CONCURRENCY: setting('sync', positiveInt(4, 64), 'pages fetched in parallel', ['leased-sync']),
  SYNC_MAX_DELETE_RATIO: setting(
    'sync',
    z.coerce.number().min(0).max(1).default(0.1),
    'mass-delete breaker: above this share missing, a run deletes nothing',
    ['leased-sync'],
  ),
  SYNC_PAGE_ATTEMPTS: setting('sync', positiveInt(5, 100), 'attempts per page and per deletion check', ['leased-sync']),
  // How long one page (or check) may keep trying, from its first attempt: no attempt starts later. 0: attempts only.
  SYNC_PAGE_RETRY_BUDGET_MS: setting(
    'sync',
    nonNegativeInt(120_000, 3_600_000),
    'after the attempts, keep retrying a page while within this budget; 0: attempts only',
    ['leased-sync'],
  ),
  // A run still going after this fails and publishes nothing. 1M users: 25 min even at 3 s a page (concurrency 4); 2 h is far beyond a healthy run.
  SYNC_MAX_DURATION_MS: setting(
    'sync',
    positiveInt(7_200_000, 7 * 24 * 3_600_000),
    'a run still going after this fails, nothing published',
    ['leased-sync'],
  ),
  // A page of 500 typical users is ~0.4 MB; a bigger body than this is dropped while it is read, so memory stays bounded.
  SYNC_MAX_PAGE_BYTES: setting('sync', positiveInt(32 * 1024 * 1024, 1024 * 1024 * 1024), 'largest page body read', ['leased-sync']),
  // A user record above this is not stored; it is set aside in rejected_records (without its content).
  SYNC_MAX_RECORD_BYTES: setting(
    'sync',
    positiveInt(1024 * 1024, 256 * 1024 * 1024),
    'largest user record stored; bigger ones go to rejected_records',
    ['leased-sync'],
  ),
  // A resolve answer is one record (~1 KB): a bigger one fails its check, so SYNC_VERIFY_CONCURRENCY checks hold at most this much each.
  SYNC_MAX_RESOLVE_BYTES: setting(
    'sync',
    positiveInt(256 * 1024, 256 * 1024 * 1024),
    'largest resolve answer read (one record): deletion checks, resolve --online',
    ['leased-sync'],
  ),
  // Deletion candidates checked upstream per run; the rest wait for a later run.
  SYNC_MAX_VERIFY: setting('sync', nonNegativeInt(5_000, 1_000_000), 'users missing from the listing checked upstream per run', [
    'leased-sync',
  ]),
  // A follower (SERVICE_BASE_URL another mirror's replica, docs/followers.md) publishes nothing from a leader whose data is older.
  SYNC_LEADER_MAX_AGE_MS: setting(
    'sync',
    positiveInt(1_800_000, 90 * 24 * 3_600_000),
    'a follower publishes nothing from a leader mirror whose data is older than this (docs/followers.md)',
    ['leased-sync'],
  ),
  // This mirror follows a leader mirror's replica (docs/followers.md): each run pins the leader and its team and checks
  // every answer against them. Explicit, never inferred: unset, an answer from a replica (x-mirror-* headers) is refused.
  SYNC_FOLLOW_LEADER: setting(
    'sync',
    flag,
    "1: SERVICE_BASE_URL is a leader mirror's replica, followed and checked on every answer (docs/followers.md)",
    ['leased-sync'],
  ),
  // A follower's team (the service's team_id); unset: the team of the mirror's own users, or of the leader's first record.
  SYNC_FOLLOW_TEAM: setting(
    'sync',
    z.guid({ error: 'must be a team id (UUID)' }).optional(),
    "a follower's team_id; unset: its mirror's own team, or the leader's first record's",
    ['leased-sync'],
  ),
  // Deletion checks in flight. They run inside the run's write transaction (a run publishes whole), so every
  // check waiting on a slow service holds the mirror's write lock longer: more in flight, shorter hold.
  SYNC_VERIFY_CONCURRENCY: setting(
    'sync',
    positiveInt(16, 256),
    "deletion checks in flight (they hold the run's write transaction while they wait)",
    ['leased-sync'],
  ),
  // Age of the last succeeded sync beyond which the mirror is reported stale; unset: three SYNC_CRON intervals.
  SYNC_STALE_AFTER_MS: setting(
    'sync',
    z.coerce
      .number()
      .int()
      .min(1_000)
      .max(90 * 24 * 3_600_000)
      .optional(),
    'age of the last succeeded sync past which the mirror is stale; unset: three SYNC_CRON intervals',
  ),
  // How long `resolve --online` waits for the mirror's write lock (a sync publishing) to store its answer; 0: not at all.
  RESOLVE_WRITE_WAIT_MS: setting(
    'sync',
    nonNegativeInt(30_000, 600_000),
    "how long resolve --online waits for the mirror's write lock to store its answer",
  ),
  // --- HTTP
  HTTP_CONNECTIONS: setting('http', positiveInt(8, 256), 'connections per origin'),
  HTTP_HEADERS_TIMEOUT_MS: setting('http', positiveInt(30_000, 600_000), 'time to the response headers'),
  HTTP_BODY_TIMEOUT_MS: setting('http', positiveInt(60_000, 600_000), 'longest gap between two body chunks'),
  // Headers and the whole body of one request: the body timeout is only an idle gap, which a trickle never trips.
  // 60 s: two attempts of a stuck page fit SYNC_PAGE_RETRY_BUDGET_MS (a 0.4 MB page needs 7 KB/s).
  HTTP_REQUEST_TIMEOUT_MS: setting('http', positiveInt(60_000, 3_600_000), 'deadline for one whole request, body included'),
  // --- Removal worker
  REMOVAL_CONCURRENCY: setting('removals', positiveInt(8, 256), 'removals in parallel per worker'),
  REMOVAL_ATTEMPTS: setting('removals', positiveInt(10, 1000), 'attempts per removal job (producers)'),
  REMOVAL_BACKOFF_MS: setting('removals', positiveInt(1_000, 3_600_000), 'first retry delay of a removal (doubles, jittered)'),
  // How long a crashed removal worker holds its jobs before another worker takes them over.
  REMOVAL_LOCK_MS: setting('removals', positiveInt(30_000, 600_000), "how long a crashed worker's job stays locked"),
  // --- Daemon
  SHUTDOWN_TIMEOUT_MS: setting('daemon', positiveInt(25_000, 600_000), 'how long a graceful shutdown waits for in-flight work'),
  // The daemon's worker watchdog: how often it looks, and how long jobs may wait with none active before a restart.
  WATCHDOG_INTERVAL_MS: setting('daemon', positiveInt(15_000, 600_000), 'how often the worker watchdog looks'),
  WATCHDOG_STALL_MS: setting('daemon', positiveInt(120_000, 3_600_000), 'jobs waiting this long with none active restart a worker'),
  STATUS_HOST: setting('daemon', z.string().min(1).default('127.0.0.1'), 'address of /healthz, /readyz, /metrics'),
  STATUS_PORT: setting('daemon', nonNegativeInt(9464, 65535), 'port of the status endpoint (0: any free port)'),
  LOG_LEVEL: setting('daemon', z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'), 'pino level'),
  // --- Replica
  // The replica (src/replica): `serve` listens on 8788 when unset; the daemon serves one only when it is set.
  REPLICA_PORT: setting(
    'replica',
    z.coerce.number().int().min(0).max(65535).optional(),
    'the replica: serve uses 8788 when unset; the daemon serves one only when set',
    ['replica'],
  ),
  REPLICA_HOST: setting(
    'replica',
    z.string().min(1).default('127.0.0.1'),
    "the replica's address; beyond loopback (0.0.0.0, a LAN address) it needs TLS: REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE",
    ['replica'],
  ),
  // The replica's own TLS: its certificate chain and key as files, read again when they change (src/replica/tls.ts).
  REPLICA_TLS_CERT_FILE: setting(
    'replica',
    z.string().min(1).optional(),
    'the replica serves https: with this PEM certificate (chain); read again when it changes, no restart',
    ['replica'],
  ),
  REPLICA_TLS_KEY_FILE: setting(
    'replica',
    z.string().min(1).optional(),
    "the replica certificate's PEM private key (a file only this account reads); read again when it changes",
    ['replica'],
  ),
  // Required by the daemon's replica; `serve` generates one (printed once) when unset. Never the service's key.
  REPLICA_API_KEY: setting('replica', secret.optional(), 'the only key the replica accepts (never SERVICE_API_KEY)', ['replica']),
  // Unset: SERVICE_API_KEY_HEADER's value and the official SDK's x-vital-api-key, so a client of the service changes only its base URL and key.
  REPLICA_API_KEY_HEADER: setting(
    'replica',
    headerName.optional(),
    'the one header the replica reads its key from; unset: SERVICE_API_KEY_HEADER or x-vital-api-key (the SDK)',
    ['replica'],
  ),
  // Past this age of the last succeeded sync, /readyz says 503 and answers carry a Warning header.
  REPLICA_MAX_STALENESS_S: setting(
    'replica',
    positiveInt(3_600, 30 * 86_400),
    'past this age the replica is not ready and its answers carry a Warning',
    ['replica'],
  ),
  // Connections the replica holds at once; unset: its descriptor limit less a reserve, at most 4,096 (src/replica/settings.ts).
  REPLICA_MAX_CONNECTIONS: setting(
    'replica',
    z.coerce.number().int().min(1).max(1_000_000).optional(),
    'connections the replica holds at once (per process); unset: the descriptor limit less 128, at most 4096',
    ['replica'],
  ),
  // A request's headers must arrive within this of its start; an idle keep-alive connection is closed after the other.
  REPLICA_HEADERS_TIMEOUT_MS: setting(
    'replica',
    positiveInt(10_000, 300_000),
    "a request's headers must arrive within this, or the connection is closed (408)",
    ['replica'],
  ),
  REPLICA_IDLE_TIMEOUT_MS: setting(
    'replica',
    positiveInt(5_000, 300_000),
    'an idle keep-alive connection to the replica is closed after this',
    ['replica'],
  ),
  // `serve` only: processes sharing the port (node:cluster), one per core the replica may use.
  REPLICA_WORKERS: setting(
    'replica',
    positiveInt(1, 64),
    '`serve`: processes answering on the one port (node:cluster); up to the cores the replica may use',
  ),
  // --- Change feed and webhooks
  // The change feed (db/change-feed.ts): a first sync's events, and how long events are kept.
  CHANGES_BASELINE: setting(
    'feed',
    z.enum(['marker', 'events'], { error: 'must be marker or events' }).default('marker'),
    'a first sync into an empty mirror: one mirror.baseline event (marker) or a user.created per user (events)',
    ['leased-sync'],
  ),
  CHANGES_RETENTION_DAYS: setting(
    'feed',
    days(30, 1 / 1_440, 3_650),
    'the daemon drops change events older than this, never one a webhook has not yet delivered or failed',
  ),
  // Users the service confirmed deleted are kept (flagged) this long, then purged after a sync; 0: kept for ever.
  DELETED_RETENTION_DAYS: setting(
    'feed',
    days(90, 0, 36_500),
    'users the service confirmed deleted stay in the mirror (flagged) this long, then go; 0: for ever',
    ['leased-sync'],
  ),
  // user_changes and rejected_records rows (the runs' detail) are dropped after this; 0: kept for ever.
  CHANGE_LOG_RETENTION_DAYS: setting(
    'feed',
    days(365, 0, 36_500),
    'the change log (user_changes) and rejected records are kept this long after a sync; 0: for ever',
    ['leased-sync'],
  ),
  // History (db/history.ts): versions and connections that ended longer ago than this are dropped; 0: kept for ever.
  HISTORY_RETENTION_DAYS: setting(
    'feed',
    days(0, 0, 36_500),
    'user versions and source connections that ended longer ago are dropped; 0 (default): history is kept for ever',
    ['leased-sync'],
  ),
  // Webhooks (jobs/webhooks/): every event POSTed here, signed per Standard Webhooks.
  WEBHOOK_URL: setting('feed', httpUrl.optional(), 'POST every change event here (the daemon; unset: no webhooks)'),
  WEBHOOK_SECRET: setting(
    'feed',
    z
      .string()
      .regex(
        /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/,
        "must be whsec_ followed by a base64 key of at least 12 bytes (make one with 'user-mirror webhooks new-secret')",
      )
      .optional(),
    "whsec_<base64>: the Standard Webhooks signing secret (required with WEBHOOK_URL; make one: 'user-mirror webhooks new-secret')",
  ),
  WEBHOOK_TIMEOUT_MS: setting('feed', positiveInt(15_000, 300_000), 'one delivery attempt may take this long'),
  // Webhook delivery this far behind (the oldest event not yet delivered, in seconds) needs an operator: status exits 1.
  WEBHOOK_LAG_WARN_SECONDS: setting(
    'feed',
    positiveInt(300, 30 * 86_400),
    'delivery further behind than this (the oldest undelivered event) makes status exit 1',
  ),
  // Sinks (src/sinks, docs/sinks.md): a JSON file of Redis Streams, JetStream and webhook destinations of the change feed.
  SINKS_FILE: setting(
    'feed',
    z.string().min(1).optional(),
    'a JSON file of sinks: the change feed delivered to Redis Streams, NATS JetStream and webhook endpoints (docs/sinks.md); unset: none',
  ),
  // --- Backups
  // Scheduled backups (`user-mirror backup`, docs/backup.md): the folder (unset: none), when (UTC), how many of each file kept.
  BACKUP_DIR: setting(
    'backups',
    z.string().min(1).optional(),
    'the daemon copies the mirror and the audit here on BACKUP_CRON (`user-mirror backup`); unset: no scheduled backups',
  ),
  BACKUP_CRON: setting(
    'backups',
    cronExpression.default('7 * * * *'),
    'backup schedule, UTC; status says the backups are stale past twice its interval',
  ),
  BACKUP_KEEP: setting(
    'backups',
    positiveInt(24, 100_000),
    'copies of each file kept in BACKUP_DIR; older ones are deleted after a good backup',
  ),
  // --- Exports for a lake
  // Scheduled exports for a lake (docs/export.md): the folder, when, how many kept.
  EXPORT_DIR: setting(
    'exports',
    z.string().min(1).optional(),
    'the daemon exports the mirror here on EXPORT_CRON as Parquet (`user-mirror export`, incremental); unset: no scheduled exports',
  ),
  EXPORT_CRON: setting(
    'exports',
    cronExpression.default('17 3 * * *'),
    'export schedule, UTC; status says the exports are stale past twice its interval',
  ),
  EXPORT_KEEP: setting(
    'exports',
    positiveInt(30, 100_000),
    'exports (folders) kept in EXPORT_DIR; older ones are deleted after a good export',
  ),
  EXPORT_POLICY: setting(
    'exports',
    z.string().min(1).optional(),
    'a field policy file (JSON) every export applies: fields it drops are absent from the files, client_user_id passed, dropped or hashed; unset: all fields',
  ),
};

export type EnvName = keyof typeof SETTINGS;

/** Each variable's schema. */
export const ENV = Object.fromEntries(Object.entries(SETTINGS).map(([name, s]) => [name, s.schema])) as {
  [K in EnvName]: (typeof SETTINGS)[K]['schema'];
};

type NamesWith<R extends SettingRole> = { [K in EnvName]: R extends (typeof SETTINGS)[K]['roles'][number] ? K : never }[EnvName];

/** The variables that carry `role`, in registry order. */
function namesWith<R extends SettingRole>(role: R): ReadonlyArray<NamesWith<R>> {
  return (Object.keys(SETTINGS) as EnvName[]).filter((n) => (SETTINGS[n].roles as readonly SettingRole[]).includes(role)) as Array<
    NamesWith<R>
  >;
}

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
/** What the replica reads (the daemon's replica, `serve`). */
export const REPLICA_ENV = namesWith('replica');
/** What a sync run under the mirror's lease reads beyond the service's variables (src/sync/exclusive-run.ts). */
export const LEASED_SYNC_ENV = namesWith('leased-sync');
/** What `serve` reads (beside SERVICE_API_KEY, read only when given, to refuse it as the replica's key). */
export const SERVE_ENV = [...REPLICA_ENV, 'REPLICA_WORKERS', 'LOG_LEVEL'] as const satisfies readonly EnvName[];
