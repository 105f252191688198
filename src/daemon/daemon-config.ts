/**
 * The daemon's configuration, read in one pass (ConfigPass): every variable
 * it uses and every check across them (the Redis mode, the management pair,
 * the webhook's secret, the replica's key, the audit not in the mirror file), so an operator sees all that is
 * wrong in one run instead of one round per restart. startDaemon builds its
 * settings from the result with the same functions, which then cannot fail.
 *
 * Removals are optional: without MANAGEMENT_URL and MANAGEMENT_KEY the
 * daemon syncs, serves its status (and replica, webhooks) and runs no
 * removal worker. Half of the pair is a mistake, not a choice, so it is an
 * error naming the half that is missing.
 */
import { ConfigPass, isGiven, LEASED_SYNC_ENV, MANAGEMENT_ENV, REPLICA_ENV, SERVICE_ENV, type Config } from '../runtime/config.js';
import { QUEUE_ENV, queueSettingsFromConfig } from '../../jobs/redis-connection.js';
import { daemonReplicaSettings } from '../replica/settings.js';
import { webhookSettings } from './change-delivery.js';
import { sinksOf } from '../sinks/sinks-file.js';
import { checkAuditLocation } from '../runtime/audit-location-check.js';
import { AUDIT_LOCATION_ENV } from '../../db/audit-location.js';

/** Every variable the daemon reads but the management pair (MANAGEMENT_ENV), which it reads only when given. */
const DAEMON_ENV = [
  // The service and the HTTP client: the sync child's, checked here so a bad value stops the daemon at start.
  ...SERVICE_ENV,
  ...QUEUE_ENV,
  'ALLOW_VOLATILE_REDIS',
  'MIRROR_DB',
  'AUDIT_DB',
  'MIRROR_ID',
  // Only for /metrics' user_mirror_wal_warn_bytes, the threshold `status` judges the WAL by.
  'MIRROR_WAL_WARN_BYTES',
  'SYNC_CRON',
  'BACKUP_DIR',
  'BACKUP_CRON',
  'BACKUP_KEEP',
  'EXPORT_DIR',
  'EXPORT_CRON',
  'EXPORT_KEEP',
  // What the sync child reads: checked here too, so a bad value stops the daemon at start.
  ...LEASED_SYNC_ENV,
  'SYNC_STALE_AFTER_MS',
  'REMOVAL_CONCURRENCY',
  'REMOVAL_BACKOFF_MS',
  'REMOVAL_LOCK_MS',
  'SHUTDOWN_TIMEOUT_MS',
  'WATCHDOG_INTERVAL_MS',
  'WATCHDOG_STALL_MS',
  'STATUS_PORT',
  'STATUS_HOST',
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
  'CHANGES_RETENTION_DAYS',
  'WEBHOOK_URL',
  'WEBHOOK_SECRET',
  'WEBHOOK_TIMEOUT_MS',
  'WEBHOOK_LAG_WARN_SECONDS',
  'SINKS_FILE',
  'LOG_LEVEL',
] as const;

/** The removal worker's pair (MANAGEMENT_ENV): both set, removals run; neither, they are off. */
type Management = Config<(typeof MANAGEMENT_ENV)[number]>;
export type DaemonConfig = Config<(typeof DAEMON_ENV)[number]> & Partial<Management>;

/** Reads the daemon's whole configuration; throws one ConfigError with every problem. */
export function readDaemonConfig(env: NodeJS.ProcessEnv = process.env, warn?: (line: string) => void): DaemonConfig {
  const given = MANAGEMENT_ENV.filter((name) => isGiven(name, env));
  const pass = new ConfigPass([...DAEMON_ENV, ...given], env, warn);
  const missing = MANAGEMENT_ENV.find((name) => !given.includes(name));
  if (given.length === 1 && missing !== undefined)
    pass.add(`${missing}: is required when ${given[0] ?? ''} is set (removals need both; unset both to run without removals)`);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  pass.check(['WEBHOOK_URL', 'WEBHOOK_SECRET'], webhookSettings);
  pass.check(['SINKS_FILE'], (c) => sinksOf(c, env));
  pass.check(REPLICA_ENV, daemonReplicaSettings);
  pass.check(AUDIT_LOCATION_ENV, checkAuditLocation);
  return pass.done();
}

/** The management pair when removals are on; undefined for a daemon without removals. */
export function managementOf(config: DaemonConfig): Management | undefined {
  const { MANAGEMENT_URL, MANAGEMENT_KEY } = config;
  return MANAGEMENT_URL === undefined || MANAGEMENT_KEY === undefined ? undefined : { MANAGEMENT_URL, MANAGEMENT_KEY };
}
