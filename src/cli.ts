/**
 * `user-mirror <command>`: the dispatcher. Each command lives in
 * src/commands/<name>.ts and is loaded only when asked for, so `resolve`
 * never pays for BullMQ and `stand-in` never opens SQLite.
 *
 * Exit codes: 0 ok, 1 failed (status: needs attention), 2 usage or configuration error, 3 not found,
 * 4 partial (sync: published without deletions), 5 busy (sync: another sync
 * holds the mirror).
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from './runtime/config.js';
import { errorMessage } from './runtime/line-text.js';
import { isRecord } from './runtime/is-record.js';
import { loadEnvFile } from './runtime/env-file.js';
import { applyFilePolicy } from './runtime/file-policy.js';
import { startTracing, stopTracing } from './runtime/tracing.js';
import { UsageError } from './commands/args.js';

export type CommandMain = (argv: string[]) => Promise<number>;

interface Command {
  summary: string;
  /** The synopsis `<command> --help` prints; absent when the command prints its own help. */
  synopsis?: string;
  /** More for `<command> --help`: exit codes a script should know. */
  details?: string;
  load: () => Promise<{ default: CommandMain }>;
}

const COMMANDS: Record<string, Command> = {
  'stand-in': { summary: 'run the local stand-in service (--help lists its flags)', load: () => import('./commands/stand-in.js') },
  sync: {
    summary: 'mirror the user directory once (--once) into MIRROR_DB',
    synopsis: 'sync --once [--concurrency N]',
    load: () => import('./commands/sync.js'),
  },
  resolve: {
    summary: 'print the user with a client_user_id from the mirror (--online asks the service)',
    synopsis: 'resolve <client_user_id> [--include-deleted] [--online] [--as-of <time>] [--team <uuid>] [--json]',
    details:
      'exit codes: 0 found; 3 not found (with --as-of: no user held the id then); 1 no mirror or the service failed;\n' +
      "  2 usage or configuration error, or an --as-of time before the mirror's history begins\n",
    load: () => import('./commands/resolve.js'),
  },
  history: {
    summary: "a client_user_id's versions and source connections over time, from the mirror's history",
    synopsis: 'history <client_user_id> [--team <uuid>] [--json]',
    details: 'exit codes: 0 found; 3 no version of the id in history; 1 the mirror cannot be read; 2 usage or configuration error\n',
    load: () => import('./commands/history.js'),
  },
  'remove-member': {
    summary: 'queue removal of an org member (--wait for the outcome)',
    synopsis: 'remove-member <org_id> <member_id> [--requested-by X] [--reason Y] [--wait [--timeout S]]',
    load: () => import('./commands/remove-member.js'),
  },
  removals: {
    summary: 'removal queue state across hosts; --failed lists failures; retry, adopt, target',
    synopsis:
      'removals [--json] | removals --failed [--json] [--limit N] | removals retry <job_id>|--all | removals adopt <job_id>|--all | removals target',
    load: () => import('./commands/removals.js'),
  },
  changes: {
    summary: 'print the change feed: creations, updates, deletions, restores (--follow keeps watching)',
    synopsis: 'changes [--after CURSOR] [--limit N] [--follow] [--json]',
    details:
      'exit codes: 0 ok; 1 the cursor is older than the retention (the message names the oldest still held) or no feed yet;\n' +
      '  2 usage or configuration error\n',
    load: () => import('./commands/changes.js'),
  },
  webhooks: {
    summary: 'webhook queue state (counts, dispatched cursor); --failed lists refused deliveries; retry; new-secret',
    synopsis:
      'webhooks [--sink NAME] [--json] | webhooks [--sink NAME] --failed [--json] [--limit N] | webhooks [--sink NAME] retry <event_id>|--all | webhooks new-secret',
    details:
      'new-secret prints a fresh WEBHOOK_SECRET (whsec_ + base64 of 32 random bytes) and nothing else; it needs no configuration\n' +
      '--sink NAME takes the queue of that webhook sink of SINKS_FILE instead of WEBHOOK_URL\n' +
      'exit codes: 0 ok; 1 some retry failed; 2 usage or configuration error (WEBHOOK_URL, or --sink, is required but for new-secret); 3 no such job\n',
    load: () => import('./commands/webhooks.js'),
  },
  sinks: {
    summary: "the sinks of SINKS_FILE: each one's destination, field policy, position and lag (docs/sinks.md)",
    synopsis: 'sinks [--json] | sinks replay <name> --from <cursor>|--since <time> [--json]',
    details:
      "exit codes: 0 every sink delivers; 1 a sink's destination does not answer or refuses, or the sink is behind the feed's\n" +
      '  retention or lags past WEBHOOK_LAG_WARN_SECONDS, or a replay was refused; 2 usage or configuration error (SINKS_FILE unset or\n' +
      '  invalid, no sink of that name)\n' +
      'replay re-sends from a point, at least once: a webhook queue gets the events again; a Redis Streams or JetStream destination\n' +
      '  that holds them is not written to (their ids are cursors): the command prints how a consumer re-reads them there\n',
    load: () => import('./commands/sinks.js'),
  },
  worker: { summary: 'run a worker on its own: worker removals', synopsis: 'worker removals', load: () => import('./commands/worker.js') },
  daemon: {
    summary: 'run the scheduled sync, the workers and the status endpoint (what pm2 runs)',
    synopsis: 'daemon',
    load: () => import('./commands/daemon.js'),
  },
  serve: {
    summary: 'answer GET /v2/user and /v2/user/resolve/{id} from the mirror (a read-only replica)',
    synopsis: 'serve',
    load: () => import('./commands/serve.js'),
  },
  demo: {
    summary: 'stand-in + sync + offline resolve + removal + status: the guided tour',
    synopsis: 'demo [--users N] [--legacy-records R]',
    load: () => import('./commands/demo.js'),
  },
  backup: {
    summary: 'a checked online copy of the mirror (--audit: the removal audit); alone: into BACKUP_DIR, rotated',
    synopsis: 'backup [<dest>] [--audit] [--json]',
    details: 'exit codes: 0 copied; 1 the copy failed (nothing left under its name); 2 usage or configuration error\n',
    load: () => import('./commands/backup.js'),
  },
  export: {
    summary: 'users, versions, sources and changes as typed Parquet (or NDJSON) files with a manifest, for a lake',
    synopsis:
      'export [--out <dir>] [--tables users,versions,sources,changes] [--as-of <time>] [--format parquet|ndjson] [--since-manifest <file>|--incremental] [--policy <file>] [--json]',
    details:
      'exit codes: 0 written; 1 the export failed (nothing left under its name); 2 usage or configuration error, or an export the\n' +
      '  mirror cannot give (an as-of time before its history, an incremental export from another change feed)\n',
    load: () => import('./commands/export.js'),
  },
  restore: {
    summary: 'install a backup as MIRROR_DB (--audit: AUDIT_DB), the replaced file kept aside',
    synopsis: 'restore <backup> [--audit] [--json]',
    details:
      'exit codes: 0 restored; 1 the backup is refused (not a mirror, newer schema, fails its check);\n' +
      '  2 usage or configuration error; 5 a process holds the mirror open, or a sync holds its lease\n',
    load: () => import('./commands/restore.js'),
  },
  status: {
    summary: 'last runs, mirror size and age, queue depths (--json for scripts)',
    synopsis: 'status [--json]',
    details:
      'exit codes: 0 all well; 1 needs attention: the mirror is stale (no succeeded sync within SYNC_STALE_AFTER_MS) or unreadable,\n' +
      '  its last sync attempt failed, its WAL is above MIRROR_WAL_WARN_BYTES, the file system holding it has less than\n' +
      '  MIRROR_DISK_WARN_BYTES free, or the daemon found MIRROR_DB deleted or replaced under it; or Redis is unreachable, removals are held\n' +
      '  or wait without a target, the webhook endpoint fails or webhooks are held, or a sink of SINKS_FILE fails (the report, mirror part included, is\n' +
      '  printed all the same); 2 usage or configuration error\n' +
      '  (a MIRROR_DB that cannot be a mirror included)\n',
    load: () => import('./commands/status.js'),
  },
};

/** The commands that run until stopped: started through npm, each stops with the npm that started it. */
const FOLLOWS_LAUNCHER = new Set(['serve', 'daemon', 'worker', 'changes', 'stand-in']);

function usage(): string {
  const rows = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(16)} ${c.summary}`);
  return `usage: user-mirror <command> [options]\n       user-mirror --version\n\ncommands:\n${rows.join('\n')}\n`;
}

/** From the package.json shipped beside dist/ (the same file in a checkout and in the packed artefact). */
function version(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
  return isRecord(pkg) && typeof pkg.version === 'string' ? pkg.version : 'unknown';
}

/**
 * A reader that closes the pipe early (`user-mirror changes | head -1`) is
 * done, not an error: end quietly with status 0, as `cat` and `grep` do,
 * instead of an unhandled EPIPE trace. Anything else on stdout is a failure.
 */
function endQuietlyOnClosedPipe(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    process.stderr.write(`user-mirror: cannot write to stdout: ${err.message}\n`);
    process.exit(1);
  });
}

async function main(argv: string[]): Promise<number> {
  endQuietlyOnClosedPipe();
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    process.stdout.write(`user-mirror ${version()} (node ${process.version})\n`);
    return 0;
  }
  const command = COMMANDS[name];
  if (command === undefined) {
    process.stderr.write(`user-mirror: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  if (command.synopsis !== undefined && (rest.includes('--help') || rest.includes('-h'))) {
    process.stdout.write(
      `usage: user-mirror ${command.synopsis}\n\n${command.summary}\n${command.details ?? ''}Configuration comes from the environment: see .env.example and docs/configuration.md.\n`,
    );
    return 0;
  }
  try {
    // Before any configuration is read: .env fills what the environment does not set.
    loadEnvFile();
    // Before any command creates a file: the mirror's end users are this account's alone (or MIRROR_GROUP's).
    // A bad MIRROR_GROUP leaves them private and is named by the command's own configuration pass, with the rest.
    applyFilePolicy();
    // Only when OTEL_* variables ask for traces is any of OpenTelemetry loaded (src/runtime/tracing.ts).
    await startTracing();
    // Under npx/npm exec a server is npm's grandchild: it stops when that npm dies (src/runtime/launcher-watch.ts).
    if (FOLLOWS_LAUNCHER.has(name)) (await import('./runtime/launcher-watch.js')).followLauncher();
    const mod = await command.load();
    return await mod.default(rest);
  } catch (err) {
    process.stderr.write(`user-mirror ${name}: ${errorMessage(err)}\n`);
    return err instanceof UsageError || err instanceof ConfigError || (await isDbSettingError(err)) ? 2 : 1;
  } finally {
    await stopTracing();
  }
}

/** A MIRROR_DB / AUDIT_DB that cannot work is a configuration error too; db/ is loaded only to ask. */
async function isDbSettingError(err: unknown): Promise<boolean> {
  if (!(err instanceof Error) || err.name !== 'MirrorDbError') return false;
  const { MirrorDbError } = await import('../db/open.js');
  return err instanceof MirrorDbError;
}

let settled = false;
/**
 * The event loop ran dry with the command unfinished: something it waited
 * on can never settle (a close waiting on a connection nothing will free).
 * Node would exit 0 here; that is never a success (issue 40: a failed
 * `sync --once` exited 0 this way).
 */
process.once('beforeExit', () => {
  if (settled) return;
  process.stderr.write('user-mirror: the command stopped without finishing: something it waited on never completed\n');
  process.exitCode = 1;
});

main(process.argv.slice(2)).then(
  (code) => {
    settled = true;
    process.exitCode = code;
  },
  (err: unknown) => {
    settled = true;
    process.stderr.write(`user-mirror: ${String(err)}\n`);
    process.exitCode = 1;
  },
);
