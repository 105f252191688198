/**
 * What the bin `user-mirror` (dist/cli.js) runs: it refuses an unsupported
 * Node with one line before the dispatcher, or anything it loads, is even
 * parsed (better-sqlite3 13 would segfault on Node 20, undici 8 throw).
 */
import { refuseUnsupportedNode } from './runtime/supported-node.js';
import { missingSyncFlags } from './sync/v8-flags.js';

refuseUnsupportedNode();
reexecWithSyncFlags();
await import('./cli.js');

/**
 * `sync` runs under the sync's V8 flags, as the daemon's sync process does
 * (./sync/v8-flags.ts: a 3M-user first sync's peak RSS 202 MB against 239
 * without). V8 reads them only at start, so the process replaces itself
 * with one started with them: process.execve keeps the pid, the standard
 * streams, the environment and so the signals a supervisor sends. It costs
 * one more start of Node, before any module of ours is loaded.
 */
function reexecWithSyncFlags(): void {
  if (process.argv[2] !== 'sync' || process.execve === undefined) return;
  const missing = missingSyncFlags(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length === 0) return;
  const [, script = '', ...args] = process.argv;
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...missing, script, ...args]);
}
