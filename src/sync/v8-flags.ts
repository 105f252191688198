/**
 * The V8 flags a sync runs under, in the daemon's sync process
 * (./child-process.ts) and in `sync --once` (src/entry.ts) alike. V8 reads
 * them only when a process starts, so both start a process with them. No
 * imports: the entry point loads this before anything else.
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

/** Which of the sync's flags the process was started without (none of an operator's choosing is overridden). */
export function missingSyncFlags(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map(flagName);
  return SYNC_V8_FLAGS.filter((f) => !given.includes(flagName(f)));
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
