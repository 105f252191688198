/**
 * What the bin `user-mirror` (dist/cli.js) runs: it refuses an unsupported
 * Node with one line before the dispatcher, or anything it loads, is even
 * parsed (better-sqlite3 13 would segfault on Node 20, undici 8 throw).
 */
import { refuseUnsupportedNode } from './runtime/supported-node.js';
import { missingSyncEnv, missingSyncFlags, syncEnv } from './sync/process-settings.js';

refuseUnsupportedNode();
reexecWithSyncFlags();
await import('./cli.js');

/**
 * `sync` runs under the sync's V8 flags and allocator setting, as the
 * daemon's sync process does (./sync/process-settings.ts: a 3M-user first
 * sync's peak RSS 202 MB against 239 without the flag). V8 and glibc read
 * them only at start, so the process replaces itself with one started with
 * them: process.execve keeps the pid, the standard streams and so the
 * signals a supervisor sends; the environment passes on, with the setting
 * added. It costs one more start of Node, before any module of ours is
 * loaded.
 */
function reexecWithSyncFlags(): void {
  if (process.argv[2] !== 'sync' || process.execve === undefined) return;
  const missing = missingSyncFlags(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length === 0 && Object.keys(missingSyncEnv(process.env)).length === 0) return;
  const [, script = '', ...args] = process.argv;
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...missing, script, ...args], syncEnv());
}
