/**
 * pm2 process file for the user-mirror daemon: `pm2 start ecosystem.config.cjs`
 * after `npm run build`.
 *
 * - fork mode, one instance: the SQLite mirror has a single writer.
 * - interpreter: the Node that runs `pm2 start` (and so loads this file), by
 *   its absolute path: in a checkout, `npx pm2 start` runs on the Node the
 *   checkout carries; on a host, on the host's. Left to itself pm2 runs a .js
 *   script with a bare `node` looked up on the PATH of the start, or, when
 *   none is found there, with the Node its own daemon happens to run on:
 *   either can be an unsupported Node (the machine's /usr/bin/node, a pm2
 *   daemon started before an upgrade), which the CLI refuses at start, in a
 *   restart loop. After moving to another Node:
 *   `pm2 delete user-mirror && pm2 start ecosystem.config.cjs` with it.
 * - wait_ready: pm2 shows the app online when it sends 'ready' (Redis and the
 *   mirror reachable). If Redis is down at start, the daemon keeps retrying
 *   and does not exit; after listen_timeout pm2 marks it online anyway and
 *   /readyz keeps answering 503 until Redis is back. Exiting instead would
 *   turn a Redis outage into a restart loop.
 * - kill_timeout: `pm2 stop` sends SIGINT, then SIGKILL after kill_timeout.
 *   The daemon needs up to SHUTDOWN_TIMEOUT_MS to let work in flight finish,
 *   plus a few seconds to close Redis and SQLite, plus a 5 s backstop margin.
 * - exp_backoff_restart_delay: a crash (bad config, unreadable mirror) is
 *   retried with growing pauses (up to 15 s), not in a tight loop.
 * - the replica on every core: with REPLICA_WORKERS above 1 (and REPLICA_PORT
 *   set) the replica leaves the daemon for an app of its own,
 *   `user-mirror-replica`, which runs `serve` with that many processes on
 *   the one port (node:cluster inside `serve`: pm2's own cluster mode would
 *   also start the daemon's side more than once). The daemon then serves no
 *   replica (REPLICA_PORT is not passed to it).
 * - env: the variables the daemon reads (src/runtime/config.ts), taken from the
 *   environment of whoever runs `pm2 start` (pm2 passes that environment on
 *   as well; the list makes the contract explicit). No values live in this
 *   file, so no secret does. pm2 keeps the environment of the start: after
 *   changing a variable, `pm2 restart user-mirror --update-env`.
 */
'use strict';

const path = require('node:path');

/** Every variable of src/runtime/config.ts's registry (test/pm2.test.ts checks the two stay in step). */
const DAEMON_VARIABLES = [
  'SERVICE_BASE_URL',
  'SERVICE_API_KEY',
  'SERVICE_API_KEY_HEADER',
  'MANAGEMENT_URL',
  'MANAGEMENT_KEY',
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_NAME',
  'REDIS_USERNAME',
  'REDIS_PASSWORD',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_TLS',
  'NODE_EXTRA_CA_CERTS',
  'ALLOW_VOLATILE_REDIS',
  'QUEUE_PREFIX',
  'MIRROR_DB',
  'AUDIT_DB',
  'MIRROR_ID',
  'SYNC_CRON',
  'SYNC_CONCURRENCY',
  'SYNC_MAX_DELETE_RATIO',
  'SYNC_PAGE_ATTEMPTS',
  'SYNC_PAGE_RETRY_BUDGET_MS',
  'SYNC_MAX_DURATION_MS',
  'SYNC_MAX_PAGE_BYTES',
  'SYNC_MAX_RECORD_BYTES',
  'SYNC_MAX_VERIFY',
  'SYNC_VERIFY_CONCURRENCY',
  'RESOLVE_WRITE_WAIT_MS',
  'SYNC_STALE_AFTER_MS',
  'HTTP_CONNECTIONS',
  'HTTP_HEADERS_TIMEOUT_MS',
  'HTTP_BODY_TIMEOUT_MS',
  'HTTP_REQUEST_TIMEOUT_MS',
  'REMOVAL_CONCURRENCY',
  'REMOVAL_ATTEMPTS',
  'REMOVAL_BACKOFF_MS',
  'REMOVAL_LOCK_MS',
  'SHUTDOWN_TIMEOUT_MS',
  'WATCHDOG_INTERVAL_MS',
  'WATCHDOG_STALL_MS',
  'STATUS_PORT',
  'STATUS_HOST',
  'REPLICA_PORT',
  'REPLICA_HOST',
  'REPLICA_API_KEY',
  'REPLICA_API_KEY_HEADER',
  'REPLICA_MAX_STALENESS_S',
  'REPLICA_WORKERS',
  'CHANGES_BASELINE',
  'CHANGES_RETENTION_DAYS',
  'WEBHOOK_URL',
  'WEBHOOK_SECRET',
  'WEBHOOK_TIMEOUT_MS',
  'LOG_LEVEL',
  'NODE_ENV',
];

const DEFAULT_SHUTDOWN_TIMEOUT_MS = 25_000;

function pickEnv(names) {
  const env = {};
  for (const name of names) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  return env;
}

function shutdownTimeoutMs() {
  const n = Number(process.env.SHUTDOWN_TIMEOUT_MS);
  return Number.isInteger(n) && n > 0 ? n : DEFAULT_SHUTDOWN_TIMEOUT_MS;
}

const logDir = process.env.USER_MIRROR_LOG_DIR || path.join(__dirname, 'logs');

/** What `serve` reads: the replica's variables, the mirror, the service key it must refuse, logging. */
const REPLICA_VARIABLES = DAEMON_VARIABLES.filter(
  (name) =>
    name.startsWith('REPLICA_') || ['MIRROR_DB', 'SERVICE_API_KEY', 'SERVICE_API_KEY_HEADER', 'LOG_LEVEL', 'NODE_ENV'].includes(name),
);

const replicaWorkers = Number(process.env.REPLICA_WORKERS || '1');
const replicaApart = replicaWorkers > 1 && Boolean(process.env.REPLICA_PORT);
const daemonEnv = pickEnv(DAEMON_VARIABLES);
if (replicaApart) delete daemonEnv.REPLICA_PORT;

const appName = process.env.USER_MIRROR_APP_NAME || 'user-mirror';

/** What both apps share: the built CLI, on this Node, one forked process each. */
function app(name, logName, command, env) {
  return {
    name,
    script: path.join(__dirname, 'dist', 'cli.js'),
    args: [command],
    interpreter: process.execPath,
    cwd: __dirname,
    exec_mode: 'fork',
    instances: 1,
    autorestart: true,
    // 2 = usage or configuration error: restarting cannot fix it.
    stop_exit_codes: [2],
    exp_backoff_restart_delay: 200,
    out_file: path.join(logDir, `${logName}.out.log`),
    error_file: path.join(logDir, `${logName}.err.log`),
    merge_logs: true,
    // JSON log lines carry their own timestamps.
    time: false,
    env,
  };
}

module.exports = {
  apps: [
    {
      ...app(appName, 'user-mirror', 'daemon', daemonEnv),
      wait_ready: true,
      listen_timeout: 30_000,
      kill_timeout: shutdownTimeoutMs() + 15_000,
      max_memory_restart: process.env.USER_MIRROR_MAX_MEMORY || '1G',
    },
    ...(replicaApart
      ? [{ ...app(`${appName}-replica`, 'user-mirror-replica', 'serve', pickEnv(REPLICA_VARIABLES)), kill_timeout: 15_000 }]
      : []),
  ],
};
