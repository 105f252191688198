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
 *   changing a variable exported in the shell, `pm2 restart user-mirror
 *   --update-env`; after editing .env, `pm2 reload user-mirror` is enough.
 * - .env: read here, by Node's own parser (never a shell: a sourced cron
 *   value's `*` fields became file names), from ENV_FILE or ./.env beside this
 *   file, for the secret check and this file's own choices, but not handed to
 *   pm2: the daemon reads it itself at every start, the environment of `pm2
 *   start` winning over it, as in the CLI (src/runtime/env-file.ts).
 */
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { URL } = require('node:url');

const envFile = process.env.ENV_FILE ? path.resolve(process.env.ENV_FILE) : path.join(__dirname, '.env');
if (!fs.existsSync(envFile) && process.env.ENV_FILE) throw new Error(`user-mirror: ENV_FILE: ${envFile} does not exist`);
/**
 * .env's values, read for the decisions this file makes (the secret check, the replica's app, the
 * kill timeout), but never put into the environment pm2 keeps with the app. pm2 keeps that
 * environment across `pm2 reload` and `pm2 restart --update-env` and never drops a variable from
 * it: a REDIS_URL once copied from .env outlived its move to REDIS_URL_FILE there, and the daemon
 * exited 2 ("REDIS_URL: set more than once") under a reload that printed ✓ (issue 50). The daemon
 * reads .env itself at every start (src/runtime/env-file.ts), so an edited .env takes effect on
 * reload, with the variables it no longer holds gone.
 */
const fileEnv = fs.existsSync(envFile) ? require('node:util').parseEnv(fs.readFileSync(envFile, 'utf8')) : {};
/** What the daemon sees at start: the environment of `pm2 start` over .env, as the CLI merges them. */
const seen = { ...fileEnv, ...process.env };

/**
 * The registry's lists as the build renders them (src/runtime/settings-manifest.ts): this plain
 * CommonJS file, which pm2 loads itself, cannot import the registry, so it reads what `npm run
 * build` wrote beside the CLI it starts. Without a build there is nothing to start.
 */
const manifestFile = path.join(__dirname, 'dist', 'settings.json');
if (!fs.existsSync(manifestFile)) throw new Error(`user-mirror: ${manifestFile} is missing: run \`npm run build\` first`);
const manifest = JSON.parse(fs.readFileSync(manifestFile, 'utf8'));

/** What every process of the project reads beyond the registry: Node's, systemd's and OpenTelemetry's own variables. */
const PROCESS_VARIABLES = [
  'NODE_EXTRA_CA_CERTS',
  'NODE_ENV',
  'CREDENTIALS_DIRECTORY',
  // Node's compile cache (src/runtime/compile-cache.ts): its folder, or an operator's own, or off.
  'XDG_CACHE_HOME',
  'NODE_COMPILE_CACHE',
  'NODE_DISABLE_COMPILE_CACHE',
];

/**
 * Every variable of the registry (secrets also by their `_FILE` form; see SECRETS), the process's
 * own, and OpenTelemetry's (docs/tracing.md); not OTEL_EXPORTER_OTLP_HEADERS, which
 * may hold a backend's token that `pm2 save` would write in clear.
 */
const DAEMON_VARIABLES = [
  ...manifest.variables,
  ...PROCESS_VARIABLES,
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_SERVICE_NAME',
  'OTEL_SDK_DISABLED',
];

/**
 * The secrets (src/runtime/secret-files.ts). pm2 keeps the whole environment of
 * `pm2 start` with the app, and `pm2 save` writes it in clear to
 * $PM2_HOME/dump.pm2: a key in that environment would sit on disk in clear. So
 * a secret set there by value is refused; the daemon reads each from the file
 * its `_FILE` variable names (or a systemd credential). The list is
 * src/runtime/secret-files.ts's FILE_SECRETS, by way of the manifest
 * (test/pm2.test.ts refuses each of those by value).
 *
 * A REDIS_URL is refused only when it carries a password, by the rule of
 * src/runtime/url-secrets.ts (which the CLI applies too): in its user info, or
 * in a query parameter, which ioredis takes as an option (`?password=`,
 * `?sentinelPassword=`; any case or encoding). The cluster and sentinel lists
 * take host:port only; one that holds an `@` or a password parameter is
 * refused as well, pointing at REDIS_PASSWORD_FILE.
 */
const SECRETS = manifest.secrets;

/** Whether a Redis URL carries a password: user info, or a query parameter named like one. */
function redisUrlCarriesPassword(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    // Not a URL the daemon would take; refused anyway if it looks like it holds a credential.
    return /@|pass/i.test(value);
  }
  return url.password !== '' || [...url.searchParams.keys()].some((key) => /pass/i.test(key));
}

/** [variable, the _FILE variable to use instead] for each secret given by value. */
const inClear = [
  ...SECRETS.filter((name) => {
    const value = seen[name];
    if (value === undefined || value === '') return false;
    return name !== 'REDIS_URL' || redisUrlCarriesPassword(value);
  }).map((name) => [name, `${name}_FILE`]),
  ...['REDIS_CLUSTER_NODES', 'REDIS_SENTINELS']
    .filter((name) => /@|pass/i.test(seen[name] || ''))
    .map((name) => [name, 'REDIS_PASSWORD_FILE (host:port only here)']),
];
if (inClear.length > 0) {
  throw new Error(
    `user-mirror: ${inClear.map(([n]) => n).join(', ')} set in the environment of pm2 start, which pm2 keeps and \`pm2 save\` writes in clear ` +
      `to dump.pm2. Put each in a file only this account can read (chmod 600) and set ${inClear.map(([, f]) => f).join(', ')} ` +
      `instead (README, "Deploy").`,
  );
}

const DEFAULT_SHUTDOWN_TIMEOUT_MS = 25_000;

/** `names` from the environment of `pm2 start` (not .env's: the app reads that itself), and which .env to read. */
function pickEnv(names) {
  const env = {};
  for (const name of names) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  if (process.env.ENV_FILE) env.ENV_FILE = envFile;
  return env;
}

function shutdownTimeoutMs() {
  const n = Number(seen.SHUTDOWN_TIMEOUT_MS);
  return Number.isInteger(n) && n > 0 ? n : DEFAULT_SHUTDOWN_TIMEOUT_MS;
}

const logDir = seen.USER_MIRROR_LOG_DIR || path.join(__dirname, 'logs');

/**
 * pm2's daemon writes the logs, under its own umask (0644 files): so the log
 * folder and files are made here, before pm2 opens them, readable by this
 * account only. The folder is narrowed only when it is the default one or is
 * made here: USER_MIRROR_LOG_DIR may name a shared folder such as /var/log.
 */
function privateLogs(dir, files) {
  const made = !fs.existsSync(dir);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (made || dir === path.join(__dirname, 'logs')) fs.chmodSync(dir, 0o700);
  for (const file of files) {
    fs.closeSync(fs.openSync(file, 'a', 0o600));
    fs.chmodSync(file, 0o600);
  }
}

/** What `serve` reads (the manifest's replica list) and the process's own variables. */
const REPLICA_VARIABLES = [...manifest.replica, ...PROCESS_VARIABLES];

const replicaWorkers = Number(seen.REPLICA_WORKERS || '1');
const replicaApart = replicaWorkers > 1 && Boolean(seen.REPLICA_PORT);
const daemonEnv = pickEnv(DAEMON_VARIABLES);
// Empty, not absent: the daemon's own reading of .env must not give it the port either (empty is unset).
if (replicaApart) daemonEnv.REPLICA_PORT = '';

const appName = seen.USER_MIRROR_APP_NAME || 'user-mirror';

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

privateLogs(logDir, [
  path.join(logDir, 'user-mirror.out.log'),
  path.join(logDir, 'user-mirror.err.log'),
  ...(replicaApart ? [path.join(logDir, 'user-mirror-replica.out.log'), path.join(logDir, 'user-mirror-replica.err.log')] : []),
]);

module.exports = {
  apps: [
    {
      ...app(appName, 'user-mirror', 'daemon', daemonEnv),
      wait_ready: true,
      listen_timeout: 30_000,
      kill_timeout: shutdownTimeoutMs() + 15_000,
      max_memory_restart: seen.USER_MIRROR_MAX_MEMORY || '1G',
    },
    ...(replicaApart
      ? [{ ...app(`${appName}-replica`, 'user-mirror-replica', 'serve', pickEnv(REPLICA_VARIABLES)), kill_timeout: 15_000 }]
      : []),
  ],
};
