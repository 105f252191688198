/**
 * What a sync's process is started with, in the daemon's sync process
 * (./child-process.ts) and in `sync --once` (src/entry.ts) alike: V8 flags
 * and one setting of the C library's allocator. V8 reads its flags, and
 * glibc its environment, only when a process starts, so both start a
 * process with them. No imports: the entry point loads this before anything
 * else.
 */

/**
 * V8 flags of the sync process. A young generation of 2 MB semi-spaces
 * (V8's default grows to 16): a run allocates page bodies and socket chunks
 * (~0.8 MB of ArrayBuffers a page) and little else, so at the default the
 * dead ones wait for a major GC, up to V8's 64 MB external-memory limit;
 * small semi-spaces collect them at every scavenge. Measured (2 cores, Node
 * 20, one process per run): peak RSS of a 3M-user re-sync 171 MB against
 * 193 MB, of a first sync 202 MB against 239 MB (1 MB semi-spaces); at 100k
 * users, 4 runs each, the re-sync 18% faster, the first sync 4% slower until
 * records were written one at a time (page-decode.ts `pageWrites`), which
 * took that back (2 MB; 1 MB was slower at both). An operator's own flag (in
 * the parent's execArgv, or in NODE_OPTIONS) wins.
 */
export const SYNC_V8_FLAGS: readonly string[] = ['--max-semi-space-size=2'];

/**
 * `user-mirror export` re-executes with the sync's flags and an old generation of at most 128 MB: the live
 * heap is 20-40 MB, but V8 grows the old space lazily and lets what was promoted (the rows' strings that
 * outlived a scavenge) pile up. A whole export of a 1,000,000-user mirror (src/export/parquet.ts writing):
 * peak RSS 166 MB with these flags, 229 MB without the bound, 194 MB with V8's default young generation
 * (which takes a sixth less CPU). An operator's own flag wins.
 */
export const EXPORT_V8_FLAGS: readonly string[] = [...SYNC_V8_FLAGS, '--max-old-space-size=128'];

/**
 * The sync process's environment beside the parent's: glibc's malloc keeps
 * at most 2 arenas. By default each thread that allocates (V8's concurrent
 * marking and compiler threads, libuv's pool) may get an arena of its own,
 * up to 8 per core, and memory freed in one is not reused by another: a
 * 3M-user re-sync peaked at 204.6 MiB of RSS by default against 198.7 MiB
 * with 2 arenas, for the same CPU (medians of 5 paired whole processes, 2
 * cores, Node 24; bench/history/README.md, "The 3M re-sync under 200 MB"). Ignored
 * by other C libraries (musl). An operator's own setting wins:
 * MALLOC_ARENA_MAX, or `glibc.malloc.arena_max` in GLIBC_TUNABLES.
 */
const SYNC_ENV_SETTINGS: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };

/** The sync's environment settings the process was started without: those to add (none of an operator's choosing is overridden). */
export function missingSyncEnv(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  if (env.MALLOC_ARENA_MAX !== undefined || (env.GLIBC_TUNABLES ?? '').includes('glibc.malloc.arena_max')) return {};
  return { ...SYNC_ENV_SETTINGS };
}

/** The sync process's environment: the parent's, and the sync's settings it lacks. */
export function syncEnv(parent: Readonly<Record<string, string | undefined>> = process.env): Record<string, string | undefined> {
  return { ...parent, ...missingSyncEnv(parent) };
}

/** Which of the sync's flags the process was started without (none of an operator's choosing is overridden). */
export function missingSyncFlags(
  execArgv: readonly string[],
  nodeOptions: string | undefined,
  flags: readonly string[] = SYNC_V8_FLAGS,
): string[] {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map(flagName);
  return flags.filter((f) => !given.includes(flagName(f)));
}

/** The parent's flags (no debugger port: it cannot be shared) and the sync's, unless the parent sets the same. */
export function syncExecArgv(parent: readonly string[], nodeOptions = process.env.NODE_OPTIONS): string[] {
  const own = parent.filter((a) => !a.startsWith('--inspect'));
  return [...own, ...missingSyncFlags(own, nodeOptions)];
}

/** `--max_semi_space_size=8` and `--max-semi-space-size` name one flag. */
function flagName(flag: string): string {
  return (flag.split('=')[0] ?? flag).replaceAll('_', '-');
}

/**
 * Deletion checks beyond this share connections: each open connection
 * buffers ~0.5 MB of an answer not yet given its turn to be read (undici),
 * so 256 connections alone took a check-bomb run to 264 MB, past the 200 MB
 * goal; 64 held it at 143 MB (bench/README.md, bench:check-bomb).
 */
export const MAX_CHECK_CONNECTIONS = 64;

/** Connections a sync's client opens: one per page in flight, and one per deletion check up to MAX_CHECK_CONNECTIONS. */
export function syncConnections(httpConnections: number, pagesInFlight: number, checksInFlight: number): number {
  return Math.max(httpConnections, pagesInFlight, Math.min(checksInFlight, MAX_CHECK_CONNECTIONS));
}
