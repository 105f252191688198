/**
 * The daemon as a child process, the way pm2 runs it: `node dist/cli.js
 * daemon` with an IPC channel (for the 'ready' message) and JSON log lines
 * on stdout. Tests need `npm run build` first.
 *
 * The child's environment is built from scratch (PATH plus what the test
 * passes), so a developer's own REDIS_URL or SERVICE_API_KEY never leaks in.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FILE_SECRETS } from '../../src/runtime/secret-files.js';
import { runCli as runCliProcess } from './cli-process.js';
import { busyMachineDeadline } from './eventually.js';

const HERE = fileURLToPath(new URL('../..', import.meta.url)).replace(/\/$/, '');
/** The repository, from these sources or from their build under dist/ (a bench runs them built). */
export const ROOT = HERE.endsWith('/dist') ? HERE.slice(0, -'/dist'.length) : HERE;
export const CLI = join(ROOT, 'dist', 'cli.js');

export type LogLine = Record<string, unknown> & { msg?: string; event?: string; level?: number };

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface DaemonProcess {
  child: ChildProcess;
  /** Every JSON line so far, in order. */
  logs: LogLine[];
  /** Non-JSON output (stderr, stray stdout), for failure messages. */
  text(): string;
  /** Resolves on the IPC 'ready' message; rejects if the process exits first. */
  ready: Promise<void>;
  exited: Promise<Exit>;
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number, what?: string): Promise<LogLine>;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<Exit>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** PATH, no .env (a developer's ./.env must not reach the tests), and what the test gives. */
export function baseEnv(extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', ENV_FILE: '/dev/null', ...extra };
}

export function spawnDaemon(env: Record<string, string>): DaemonProcess {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const child = spawn(process.execPath, [CLI, 'daemon'], {
    cwd: ROOT,
    env: baseEnv(env),
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  running.add(child);
  const logs: LogLine[] = [];
  let other = '';
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const w of [...waiters]) w();
  };

  let pending = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    pending += chunk.toString();
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        other += `${line}\n`;
      }
    }
    notify();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    other += chunk.toString();
  });

  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
      notify();
    });
  });
  let hasExited = false;
  void exited.then(() => {
    hasExited = true;
  });

  const ready = new Promise<void>((resolve, reject) => {
    child.on('message', (m) => {
      if (m === 'ready') resolve();
    });
    void exited.then((e) => reject(new Error(`daemon exited before ready (${e.code ?? e.signal}): ${other}`)));
  });
  ready.catch(() => undefined);

  const text = () => other;

  const waitForLog: DaemonProcess['waitForLog'] = (predicate, timeoutMs = 20_000, what = 'log line') =>
    new Promise((resolve, reject) => {
      let seen = 0;
      const check = () => {
        for (; seen < logs.length; seen++) {
          const line = logs[seen];
          if (line !== undefined && predicate(line)) {
            done();
            resolve(line);
            return;
          }
        }
        if (hasExited) {
          done();
          reject(new Error(`daemon exited while waiting for ${what}: ${other}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what}; last lines: ${JSON.stringify(logs.slice(-5))} ${other}`));
      }, busyMachineDeadline(timeoutMs));
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });

  return {
    child,
    logs,
    text,
    ready,
    exited,
    waitForLog,
    async stop(signal = 'SIGTERM', timeoutMs = 30_000) {
      if (!hasExited) child.kill(signal);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        // A graceful stop drains queues and flushes spans: on a busy machine that takes several times longer.
        timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`daemon did not exit within ${busyMachineDeadline(timeoutMs)} ms of ${signal}`));
        }, busyMachineDeadline(timeoutMs));
      });
      try {
        return await Promise.race([exited, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Runs `node dist/cli.js ...args` to completion, with only `env` (plus PATH) in its environment. */
export function runCli(args: readonly string[], env: Record<string, string>, timeoutMs = 30_000): ReturnType<typeof runCliProcess> {
  return runCliProcess(args, baseEnv(env), timeoutMs);
}

/** GET on the daemon's status endpoint. */
export async function getStatus(port: number, path: string): Promise<{ status: number; body: string; contentType: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text(), contentType: res.headers.get('content-type') ?? '' };
}

/** One unlabelled sample of /metrics: its value, or undefined when the daemon serves none. */
export async function scrapeMetric(port: number, name: string): Promise<number | undefined> {
  const body = (await getStatus(port, '/metrics')).body;
  const line = body.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

export interface DaemonEnvParts {
  redisUrl: string;
  standIn: { baseUrl: string; managementUrl: string; apiKey: string; apiKeyHeader: string; managementKey: string };
  mirrorDb: string;
  queuePrefix: string;
  statusPort: number;
  mirrorId?: string;
  /** Per-second schedule by default, so tests see ticks without waiting minutes. */
  cron?: string;
  extra?: Record<string, string>;
}

/** The daemon's environment for a test: everything it reads, nothing from the developer's shell. */
export function daemonEnv(p: DaemonEnvParts): Record<string, string> {
  return {
    SERVICE_BASE_URL: p.standIn.baseUrl,
    SERVICE_API_KEY: p.standIn.apiKey,
    SERVICE_API_KEY_HEADER: p.standIn.apiKeyHeader,
    MANAGEMENT_URL: p.standIn.managementUrl,
    MANAGEMENT_KEY: p.standIn.managementKey,
    REDIS_URL: p.redisUrl,
    QUEUE_PREFIX: p.queuePrefix,
    MIRROR_DB: p.mirrorDb,
    MIRROR_ID: p.mirrorId ?? 'test-mirror',
    SYNC_CRON: p.cron ?? '*/2 * * * * *',
    SYNC_PAGE_ATTEMPTS: '2',
    // Attempts only: a test of a service that is down wants the run to give up quickly.
    SYNC_PAGE_RETRY_BUDGET_MS: '0',
    STATUS_HOST: '127.0.0.1',
    STATUS_PORT: String(p.statusPort),
    SHUTDOWN_TIMEOUT_MS: '10000',
    WATCHDOG_INTERVAL_MS: '1000',
    WATCHDOG_STALL_MS: '5000',
    LOG_LEVEL: 'info',
    ...p.extra,
  };
}

/** `env` with its secrets moved into files (mode 0600) in `dir`, named by their `_FILE` variables: the README's deploy. */
export function keysAsFiles(env: Record<string, string>, dir: string): Record<string, string> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const out = { ...env };
  for (const name of FILE_SECRETS) {
    const value = out[name];
    if (value === undefined || (name === 'REDIS_URL' && !value.includes('@'))) continue;
    const path = join(dir, name.toLowerCase());
    writeFileSync(path, `${value}\n`, { mode: 0o600 });
    delete out[name];
    out[`${name}_FILE`] = path;
  }
  return out;
}

/**
 * The pids of a daemon's scheduled children (a backup, an export) still running with `setting` (`EXPORT_DIR=/x`) in
 * their environment and an argument `isChild` accepts: they outlive a stopped daemon until their attempt is whole
 * (src/daemon/child-schedule.ts), so a test that reads the folder after the stop waits for none to be left.
 */
export function scheduledChildrenRunning(setting: string, isChild: (arg: string) => boolean): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').some(isChild)) continue;
      if (readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0').includes(setting)) pids.push(Number(entry));
    } catch {
      // Gone between the listing and the read, or not ours to read: not one of the daemon's children.
    }
  }
  return pids;
}
