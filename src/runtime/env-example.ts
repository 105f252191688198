/**
 * `.env.example`, rendered from the configuration registry (config.ts): one
 * line per variable with its default, what it is for, and whether it is a
 * secret. `npm run env-example` writes the file; test/release.test.ts fails
 * when the committed file and the registry drift apart.
 *
 * The descriptions are a Record over every variable name, so a variable
 * added to the registry without one does not compile.
 */
import { ENV, SECRET_ENV, type EnvName } from './config.js';
import { isFileSecret } from './secret-files.js';

/** The registry's names in the reader's groups: a grouping, not a second registry (ungrouped() names any left out). */
const GROUPS: ReadonlyArray<[title: string, names: readonly EnvName[]]> = [
  ['The service (sync, resolve --online)', ['SERVICE_BASE_URL', 'SERVICE_API_KEY', 'SERVICE_API_KEY_HEADER', 'SERVICE_CA_FILE']],
  ['Nothing in clear beyond this host (docs/configuration.md)', ['TLS_BY_PROXY']],
  ['The management service (removals)', ['MANAGEMENT_URL', 'MANAGEMENT_KEY']],
  [
    'Redis: one of REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS',
    [
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
      'QUEUE_PREFIX',
      'ALLOW_VOLATILE_REDIS',
    ],
  ],
  [
    'Files and identity',
    ['MIRROR_DB', 'AUDIT_DB', 'MIRROR_GROUP', 'MIRROR_ID', 'MIRROR_WAL_WARN_BYTES', 'MIRROR_DISK_WARN_BYTES', 'MIRROR_CHECKPOINTS'],
  ],
  [
    'Sync',
    [
      'SYNC_CRON',
      'SYNC_CONCURRENCY',
      'SYNC_MAX_DELETE_RATIO',
      'SYNC_PAGE_ATTEMPTS',
      'SYNC_PAGE_RETRY_BUDGET_MS',
      'SYNC_MAX_DURATION_MS',
      'SYNC_MAX_PAGE_BYTES',
      'SYNC_MAX_RECORD_BYTES',
      'SYNC_MAX_RESOLVE_BYTES',
      'SYNC_MAX_VERIFY',
      'SYNC_LEADER_MAX_AGE_MS',
      'SYNC_FOLLOW_LEADER',
      'SYNC_FOLLOW_TEAM',
      'SYNC_VERIFY_CONCURRENCY',
      'SYNC_STALE_AFTER_MS',
      'RESOLVE_WRITE_WAIT_MS',
    ],
  ],
  ['HTTP', ['HTTP_CONNECTIONS', 'HTTP_HEADERS_TIMEOUT_MS', 'HTTP_BODY_TIMEOUT_MS', 'HTTP_REQUEST_TIMEOUT_MS']],
  ['Removal worker', ['REMOVAL_CONCURRENCY', 'REMOVAL_ATTEMPTS', 'REMOVAL_BACKOFF_MS', 'REMOVAL_LOCK_MS']],
  ['Daemon', ['SHUTDOWN_TIMEOUT_MS', 'WATCHDOG_INTERVAL_MS', 'WATCHDOG_STALL_MS', 'STATUS_HOST', 'STATUS_PORT', 'LOG_LEVEL']],
  [
    'Replica',
    [
      'REPLICA_PORT',
      'REPLICA_HOST',
      'REPLICA_TLS_CERT_FILE',
      'REPLICA_TLS_KEY_FILE',
      'REPLICA_API_KEY',
      'REPLICA_API_KEY_HEADER',
      'REPLICA_MAX_STALENESS_S',
      'REPLICA_MAX_CONNECTIONS',
      'REPLICA_HEADERS_TIMEOUT_MS',
      'REPLICA_IDLE_TIMEOUT_MS',
      'REPLICA_WORKERS',
    ],
  ],
  [
    'Change feed and webhooks',
    [
      'CHANGES_BASELINE',
      'CHANGES_RETENTION_DAYS',
      'DELETED_RETENTION_DAYS',
      'CHANGE_LOG_RETENTION_DAYS',
      'HISTORY_RETENTION_DAYS',
      'WEBHOOK_URL',
      'WEBHOOK_SECRET',
      'WEBHOOK_TIMEOUT_MS',
      'WEBHOOK_LAG_WARN_SECONDS',
      'SINKS_FILE',
    ],
  ],
  ['Backups', ['BACKUP_DIR', 'BACKUP_CRON', 'BACKUP_KEEP']],
  ['Exports for a lake', ['EXPORT_DIR', 'EXPORT_CRON', 'EXPORT_KEEP', 'EXPORT_POLICY']],
];

const ABOUT: Record<EnvName, string> = {
  SERVICE_BASE_URL: "the service's base address ({base_url}); unset: `demo` uses the local stand-in",
  SERVICE_API_KEY: 'team API key; sent only to SERVICE_BASE_URL',
  SERVICE_API_KEY_HEADER: 'header carrying the team key',
  SERVICE_CA_FILE:
    "PEM file of the CA(s) that signed SERVICE_BASE_URL's certificate when it is private (a follower's leader replica); unset: the system's CAs",
  TLS_BY_PROXY:
    '1: a TLS proxy stands in front: accept a replica beyond loopback without its own TLS and plain http: service, management and webhook URLs to other hosts',
  MANAGEMENT_URL:
    "the management address ({management_url}); also names the removal queue's target; unset with MANAGEMENT_KEY: the daemon runs without removals",
  MANAGEMENT_KEY: 'management key (X-Management-Key); sent only to MANAGEMENT_URL',
  REDIS_URL: 'a single node, redis:// or rediss:// (TLS); credentials and db in the URL',
  REDIS_CLUSTER_NODES: 'a Redis Cluster: host:port,host:port (needs a {hash tag} in QUEUE_PREFIX)',
  REDIS_SENTINELS: "Redis under Sentinel: the sentinels' host:port list",
  REDIS_SENTINEL_NAME: "the master's name the sentinels monitor",
  REDIS_USERNAME: 'user for cluster or Sentinel nodes',
  REDIS_PASSWORD: 'password for cluster or Sentinel nodes',
  REDIS_SENTINEL_PASSWORD: "the sentinels' own password",
  REDIS_TLS: '1: TLS to cluster or Sentinel nodes (a single node: rediss:// in REDIS_URL)',
  REDIS_TLS_CA_FILE: "with TLS: PEM file of the CA(s) that signed Redis's certificate; unset: the system's CAs",
  REDIS_TLS_CERT_FILE: "with TLS: PEM file of this client's certificate (Redis's tls-auth-clients); needs REDIS_TLS_KEY",
  REDIS_TLS_KEY: "with TLS: the client certificate's PEM private key",
  REDIS_TLS_SERVERNAME: "with TLS: the name Redis's certificate must carry when it is not the host connected to",
  QUEUE_PREFIX: 'BullMQ key prefix; at most one {hash tag}',
  ALLOW_VOLATILE_REDIS: '1: run removals on a Redis that can lose them (no AOF, or evicting)',
  MIRROR_DB: 'the SQLite mirror file',
  AUDIT_DB: "the removal audit's SQLite file; unset: next to MIRROR_DB",
  MIRROR_DISK_WARN_BYTES:
    'free bytes on the file system holding MIRROR_DB below which status exits 1 (DISK LOW) before it is full; 0: only when full',
  MIRROR_WAL_WARN_BYTES:
    'a mirror WAL above this makes status exit 1 (external checkpoints: its part not yet copied); unset: half the mirror, at least 64 MiB',
  MIRROR_CHECKPOINTS: 'after-sync: user-mirror checkpoints the WAL after each sync; external: Litestream does (it must own them)',
  MIRROR_GROUP: 'a group that may read the mirror and audit (files 0640); unset: this account only (0600)',
  MIRROR_ID: "names this mirror's sync queue; unset: the host name",
  SYNC_CRON: 'sync schedule, UTC (a 6th leading field is seconds)',
  SYNC_CONCURRENCY: 'pages fetched in parallel',
  SYNC_MAX_DELETE_RATIO: 'mass-delete breaker: above this share missing, a run deletes nothing',
  SYNC_PAGE_ATTEMPTS: 'attempts per page and per deletion check',
  SYNC_PAGE_RETRY_BUDGET_MS: 'after the attempts, keep retrying a page while within this budget; 0: attempts only',
  SYNC_MAX_DURATION_MS: 'a run still going after this fails, nothing published',
  SYNC_MAX_PAGE_BYTES: 'largest page body read',
  SYNC_MAX_RECORD_BYTES: 'largest user record stored; bigger ones go to rejected_records',
  SYNC_MAX_RESOLVE_BYTES: 'largest resolve answer read (one record): deletion checks, resolve --online',
  SYNC_MAX_VERIFY: 'users missing from the listing checked upstream per run',
  SYNC_LEADER_MAX_AGE_MS: 'a follower publishes nothing from a leader mirror whose data is older than this (docs/followers.md)',
  SYNC_FOLLOW_LEADER: "1: SERVICE_BASE_URL is a leader mirror's replica, followed and checked on every answer (docs/followers.md)",
  SYNC_FOLLOW_TEAM: "a follower's team_id; unset: its mirror's own team, or the leader's first record's",
  SYNC_VERIFY_CONCURRENCY: "deletion checks in flight (they hold the run's write transaction while they wait)",
  SYNC_STALE_AFTER_MS: 'age of the last succeeded sync past which the mirror is stale; unset: three SYNC_CRON intervals',
  RESOLVE_WRITE_WAIT_MS: "how long resolve --online waits for the mirror's write lock to store its answer",
  HTTP_CONNECTIONS: 'connections per origin',
  HTTP_HEADERS_TIMEOUT_MS: 'time to the response headers',
  HTTP_BODY_TIMEOUT_MS: 'longest gap between two body chunks',
  HTTP_REQUEST_TIMEOUT_MS: 'deadline for one whole request, body included',
  REMOVAL_CONCURRENCY: 'removals in parallel per worker',
  REMOVAL_ATTEMPTS: 'attempts per removal job (producers)',
  REMOVAL_BACKOFF_MS: 'first retry delay of a removal (doubles, jittered)',
  REMOVAL_LOCK_MS: "how long a crashed worker's job stays locked",
  SHUTDOWN_TIMEOUT_MS: 'how long a graceful shutdown waits for in-flight work',
  WATCHDOG_INTERVAL_MS: 'how often the worker watchdog looks',
  WATCHDOG_STALL_MS: 'jobs waiting this long with none active restart a worker',
  STATUS_HOST: 'address of /healthz, /readyz, /metrics',
  STATUS_PORT: 'port of the status endpoint (0: any free port)',
  LOG_LEVEL: 'pino level',
  REPLICA_PORT: 'the replica: serve uses 8788 when unset; the daemon serves one only when set',
  REPLICA_HOST:
    "the replica's address; beyond loopback (0.0.0.0, a LAN address) it needs TLS: REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE",
  REPLICA_TLS_CERT_FILE: 'the replica serves https: with this PEM certificate (chain); read again when it changes, no restart',
  REPLICA_TLS_KEY_FILE: "the replica certificate's PEM private key (a file only this account reads); read again when it changes",
  REPLICA_API_KEY: 'the only key the replica accepts (never SERVICE_API_KEY)',
  REPLICA_API_KEY_HEADER: 'the one header the replica reads its key from; unset: SERVICE_API_KEY_HEADER or x-vital-api-key (the SDK)',
  REPLICA_MAX_STALENESS_S: 'past this age the replica is not ready and its answers carry a Warning',
  REPLICA_MAX_CONNECTIONS: 'connections the replica holds at once (per process); unset: the descriptor limit less 128, at most 4096',
  REPLICA_HEADERS_TIMEOUT_MS: "a request's headers must arrive within this, or the connection is closed (408)",
  REPLICA_IDLE_TIMEOUT_MS: 'an idle keep-alive connection to the replica is closed after this',
  REPLICA_WORKERS: '`serve`: processes answering on the one port (node:cluster); up to the cores the replica may use',
  CHANGES_BASELINE: 'a first sync into an empty mirror: one mirror.baseline event (marker) or a user.created per user (events)',
  CHANGES_RETENTION_DAYS: 'the daemon drops change events older than this, never one a webhook has not yet delivered or failed',
  DELETED_RETENTION_DAYS: 'users the service confirmed deleted stay in the mirror (flagged) this long, then go; 0: for ever',
  CHANGE_LOG_RETENTION_DAYS: 'the change log (user_changes) and rejected records are kept this long after a sync; 0: for ever',
  HISTORY_RETENTION_DAYS: 'user versions and source connections that ended longer ago are dropped; 0 (default): history is kept for ever',
  WEBHOOK_URL: 'POST every change event here (the daemon; unset: no webhooks)',
  WEBHOOK_SECRET:
    "whsec_<base64>: the Standard Webhooks signing secret (required with WEBHOOK_URL; make one: 'user-mirror webhooks new-secret')",
  WEBHOOK_TIMEOUT_MS: 'one delivery attempt may take this long',
  BACKUP_DIR: 'the daemon copies the mirror and the audit here on BACKUP_CRON (`user-mirror backup`); unset: no scheduled backups',
  BACKUP_CRON: 'backup schedule, UTC; status says the backups are stale past twice its interval',
  BACKUP_KEEP: 'copies of each file kept in BACKUP_DIR; older ones are deleted after a good backup',
  EXPORT_DIR:
    'the daemon exports the mirror here on EXPORT_CRON as Parquet (`user-mirror export`, incremental); unset: no scheduled exports',
  EXPORT_CRON: 'export schedule, UTC; status says the exports are stale past twice its interval',
  EXPORT_KEEP: 'exports (folders) kept in EXPORT_DIR; older ones are deleted after a good export',
  EXPORT_POLICY:
    'a field policy file (JSON) every export applies: fields it drops are absent from the files, client_user_id passed, dropped or hashed; unset: all fields',
  WEBHOOK_LAG_WARN_SECONDS: 'delivery further behind than this (the oldest undelivered event) makes status exit 1',
  SINKS_FILE: 'a JSON file of sinks: the change feed delivered to Redis Streams, NATS JetStream and webhook endpoints (docs/sinks.md); unset: none',
};

/** The default as the registry applies it, or undefined (required, or derived at run time). */
function defaultOf(name: EnvName): string | undefined {
  const parsed = ENV[name].safeParse(undefined);
  if (!parsed.success || parsed.data === undefined) return undefined;
  // MIRROR_ID's default is this host's name: not something to write into a shared file.
  if (name === 'MIRROR_ID') return undefined;
  const value: unknown = parsed.data;
  if (typeof value === 'boolean') return value ? '1' : '0';
  return String(value);
}

export function renderEnvExample(): string {
  const lines = [
    '# user-mirror configuration: every variable it reads, rendered from src/runtime/config.ts (npm run env-example).',
    '# Copy to .env and fill in; commented lines show defaults. Lines marked "secret" never go into git or a log.',
    '# The CLI and ecosystem.config.cjs read .env themselves (ENV_FILE names another file); the environment wins over it.',
    '# Give secrets as files (NAME_FILE, or systemd credentials in $CREDENTIALS_DIRECTORY): pm2 save stores the environment in clear.',
  ];
  for (const [title, names] of GROUPS) {
    lines.push('', `# --- ${title}`);
    for (const name of names) {
      const def = defaultOf(name);
      const fromFile = isFileSecret(name);
      lines.push(
        `# ${ABOUT[name]}${fromFile ? ` (secret; or ${name}_FILE, a file holding it, mode 0600)` : SECRET_ENV.has(name) ? ' (secret)' : ''}`,
      );
      lines.push(def === undefined ? `# ${name}=` : `# ${name}=${quoted(def)}`);
      if (fromFile) lines.push(`# ${name}_FILE=`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/**
 * A value with anything a shell or the .env parser would take apart (a cron
 * expression's spaces and `*`), in single quotes: the file is read by Node's
 * parser (src/runtime/env-file.ts), which drops them, and stays safe to source.
 */
export function quoted(value: string): string {
  return /^[A-Za-z0-9_./:@,+-]*$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

/** Every registry variable appears in exactly one group. */
export function ungrouped(): EnvName[] {
  const grouped = new Set(GROUPS.flatMap(([, names]) => names));
  return (Object.keys(ENV) as EnvName[]).filter((n) => !grouped.has(n));
}
