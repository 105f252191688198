/**
 * What the bin `user-mirror` (dist/cli.js) runs: it refuses an unsupported
 * Node with one line before the dispatcher, or anything it loads, is even
 * parsed (better-sqlite3 13 would segfault on Node 20, undici 8 throw).
 */
import { refuseUnsupportedNode } from './runtime/supported-node.js';
import { enableOwnCompileCache } from './runtime/compile-cache.js';
import { EXPORT_V8_FLAGS, missingSyncEnv, missingSyncFlags, SYNC_V8_FLAGS, syncEnv } from './sync/process-settings.js';

refuseUnsupportedNode();
// Before the re-exec: it passes the cache folder on, so the next image starts with it.
enableOwnCompileCache();
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
 * loaded: 34-37 ms of CPU, about 3% of a 100,000-user re-sync's (paired whole
 * processes, bench/history/README.md, "Start-up"). Kept, as nothing cheaper keeps
 * the memory: `v8.setFlagsFromString('--max-semi-space-size=2')` at start
 * does not bound the young generation (V8 sized it when the heap was set
 * up; measured, it still grew to 128 MB of semi-spaces against 4 MB with
 * the flag at start), and glibc reads MALLOC_ARENA_MAX before any
 * JavaScript runs. The daemon's sync process is started with both
 * (./sync/child-process.ts) and never re-executes.
 */
function reexecWithSyncFlags(): void {
  // `export` too: its garbage (each row's strings) is young, and small semi-spaces free it at every scavenge
  // (./sync/process-settings.ts EXPORT_V8_FLAGS has the figures).
  if ((process.argv[2] !== 'sync' && process.argv[2] !== 'export') || process.execve === undefined) return;
  const missing = missingSyncFlags(
    process.execArgv,
    process.env.NODE_OPTIONS,
    process.argv[2] === 'export' ? EXPORT_V8_FLAGS : SYNC_V8_FLAGS,
  );
  if (missing.length === 0 && Object.keys(missingSyncEnv(process.env)).length === 0) return;
  const [, script = '', ...args] = process.argv;
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...missing, script, ...args], syncEnv());
}
