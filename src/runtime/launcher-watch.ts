/**
 * A long-running command started through npm (`npx user-mirror serve`,
 * `npm exec`, `npm run`) stops when the npm process that started it dies.
 *
 * npm runs the command as a grandchild (npm, then `sh -c`, then node): an
 * operator or a supervisor that kills the PID it started kills npm, and the
 * server went on serving, orphaned (issue 50). SIGTERM to npm reaches the
 * shell, which dies and leaves node behind; SIGKILL reaches nothing. So at
 * start the command notes the processes between itself and that npm (their
 * PID and start time, so a reused PID is not mistaken for them); once one of
 * them is gone, it sends itself SIGTERM: the command's own graceful stop runs,
 * as if it had been stopped directly.
 *
 * Only under npm (npm sets `npm_lifecycle_event` in its children's
 * environment): `node dist/cli.js serve` under systemd, pm2 or `nohup` keeps
 * running whoever its parent was. Linux only (it reads /proc); elsewhere
 * nothing is watched.
 */
import { readFileSync } from 'node:fs';

/** A process as /proc tells it: its parent, its start time (clock ticks since boot), its command line. */
export interface ProcInfo {
  ppid: number;
  startTime: string;
  state: string;
  cmdline: string;
}

interface Watched {
  pid: number;
  startTime: string;
}

const NPM = /^(npm|npx)( |$)|\/npm-cli\.js|\/npx-cli\.js/;
/** The shell npm runs a bin through (`sh -c 'user-mirror' serve`). */
const SHELL = /^(\S*\/)?(sh|bash|dash) -c /;

/**
 * npm itself as the parent, or the shell npm runs the command through and npm above it: those
 * processes, else none (then there is nothing to follow). Nothing further up: a daemon that pm2's
 * daemon started inherits npm's variables from an `npx pm2 start`, but pm2, not that npm, runs it.
 */
export function launcherChain(ppid: number, read: (pid: number) => ProcInfo | undefined): Watched[] {
  const parent = ppid > 1 ? read(ppid) : undefined;
  if (parent === undefined) return [];
  const first = { pid: ppid, startTime: parent.startTime };
  if (NPM.test(parent.cmdline)) return [first];
  if (!SHELL.test(parent.cmdline) || parent.ppid <= 1) return [];
  const npm = read(parent.ppid);
  return npm !== undefined && NPM.test(npm.cmdline) ? [first, { pid: parent.ppid, startTime: npm.startTime }] : [];
}

/** Whether `w` still runs: there, not a zombie, and the same process (not a reused PID). */
export function stillRunning(w: Watched, read: (pid: number) => ProcInfo | undefined): boolean {
  const info = read(w.pid);
  return info !== undefined && info.startTime === w.startTime && info.state !== 'Z' && info.state !== 'X';
}

/** /proc/<pid>/stat and cmdline; undefined when the process is gone (or there is no /proc). */
export function readProc(pid: number): ProcInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
    // Fields after the name: state (3), ppid (4), … starttime (22).
    return { state: fields[0] ?? '', ppid: Number(fields[1]), startTime: fields[19] ?? '', cmdline };
  } catch {
    return undefined;
  }
}

/**
 * Under npm, checks every `intervalMs` that npm and the shell between are still there; when one is
 * gone, calls `onGone` once (by default: SIGTERM to this process). Returns a function that stops
 * watching. The timer never keeps the process alive.
 */
export function followLauncher(
  env: NodeJS.ProcessEnv = process.env,
  onGone: () => void = () => process.kill(process.pid, 'SIGTERM'),
  intervalMs = 1_000,
): () => void {
  // A cluster worker follows its primary, which stops it.
  if (env.npm_lifecycle_event === undefined || env.NODE_UNIQUE_ID !== undefined) return () => undefined;
  const chain = launcherChain(process.ppid, readProc);
  if (chain.length === 0) return () => undefined;
  const timer = setInterval(() => {
    if (chain.every((w) => stillRunning(w, readProc))) return;
    clearInterval(timer);
    process.stderr.write('user-mirror: the npm process that started this command is gone; stopping\n');
    onGone();
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
