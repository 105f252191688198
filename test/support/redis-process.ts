/**
 * One `redis-server` of a test topology (a cluster node, a master, a
 * replica, a sentinel): launched on a free port in a temporary directory,
 * waited for until it answers PING, killed on test-process exit, and
 * described (stderr and log tail) in any error that must say why.
 *
 * No redis-server or redis-cli on PATH is an error that says what to do.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { busyMachineDeadline, eventually } from './eventually.js';
import { freePort } from './redis-server.js';

export const HOST = '127.0.0.1';

export interface RedisProcess {
  role: string;
  port: number;
  dir: string;
  child: ChildProcess;
  stderr(): string;
}

const running = new Set<ChildProcess>();

// A test process that dies must not leave Redis servers behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A single node on `port` in `dir` as the removal queue requires (AOF, noeviction), for `launchRedis`. */
export function durableNodeArgs(port: number, dir: string): string[] {
  return ['--port', String(port), '--bind', HOST, '--dir', dir, '--save', '', '--appendonly', 'yes', '--maxmemory-policy', 'noeviction'];
}

/**
 * Starts `redis-server` with the arguments `argsFor` gives for its port and
 * directory. Call one at a time: freePort only promises a port is free now.
 */
export async function launchRedis(
  role: string,
  argsFor: (port: number, dir: string) => string[] | Promise<string[]>,
): Promise<RedisProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-redis-'));
  const port = await freePort();
  const child = spawn('redis-server', await argsFor(port, dir), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  running.add(child);
  child.once('exit', () => running.delete(child));
  const proc: RedisProcess = { role, port, dir, child, stderr: () => stderr };
  const fail = async (why: string, logs = true): Promise<never> => {
    await terminate(child, 'SIGKILL');
    const detail = logs ? diagnostics([proc]) : '';
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${why}${detail}`);
  };

  const deadline = Date.now() + busyMachineDeadline(10_000);
  while (Date.now() < deadline) {
    const failed: NodeJS.ErrnoException | undefined = await Promise.race([spawnError, sleep(50).then(() => undefined)]);
    if (failed?.code === 'ENOENT') return fail('redis-server is not on PATH: install Redis (e.g. apt-get install redis-server)', false);
    if (failed !== undefined) return fail(`${role} failed to start on port ${port}: ${failed.message}`);
    if (child.exitCode !== null) return fail(`${role} on port ${port} exited with ${child.exitCode}`);
    const pong = await redisCli(port, ['ping']).catch((e: Error) => e);
    if (pong instanceof Error && pong.message.includes('not on PATH')) return fail(pong.message, false);
    if (typeof pong === 'string' && pong.startsWith('PONG')) return proc;
  }
  return fail(`${role} did not answer on port ${port} within ${busyMachineDeadline(10_000) / 1000} s`);
}

/** One command through redis-cli (`port` undefined: the args name their own); rejects with its stderr when it fails. */
export function redisCli(port: number | undefined, args: string[], timeoutMs = 3_000): Promise<string> {
  const where = port === undefined ? ['-h', HOST] : ['-h', HOST, '-p', String(port)];
  return new Promise((resolve, reject) => {
    execFile('redis-cli', [...where, ...args], { timeout: timeoutMs }, (error, out, err) => {
      if ((error as NodeJS.ErrnoException | null)?.code === 'ENOENT') {
        reject(new Error('redis-cli is not on PATH: install Redis (e.g. apt-get install redis-tools)'));
      } else if (error !== null) {
        reject(
          new Error(
            `redis-cli ${where.slice(2).join(' ')} ${args.join(' ')}: ${[String(out).trim(), String(err).trim()].filter((s) => s !== '').join('\n') || error.message}`,
          ),
        );
      } else resolve(String(out));
    });
  });
}

/** `eventually(ready)`, whose error also describes every process: a topology that never forms says why in its logs. */
export async function waitFor(timeoutMs: number, what: string, procs: RedisProcess[], ready: () => Promise<boolean>): Promise<void> {
  try {
    await eventually(ready, timeoutMs, `${what} (${timeoutMs / 1000} s)`);
  } catch (err) {
    throw new Error(`${err instanceof Error ? err.message : String(err)}${diagnostics(procs)}`, { cause: err });
  }
}

/** Each process's stderr and log tail (`redis.log` in its directory), for errors that must say why. */
export function diagnostics(procs: RedisProcess[]): string {
  const tail = (file: string): string => {
    try {
      return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-12).join('\n');
    } catch {
      return '(no log)';
    }
  };
  const state = (p: RedisProcess) => p.child.exitCode ?? p.child.signalCode ?? 'running';
  return procs
    .map((p) => `\n--- ${p.role} ${p.port} (${state(p)}) stderr: ${p.stderr().trim() || '(none)'}\n${tail(join(p.dir, 'redis.log'))}`)
    .join('');
}

export async function terminate(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  // A server stuck in shutdown must not hang the test run.
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/** Stops every process and removes their directories. */
export async function stopAll(procs: RedisProcess[]): Promise<void> {
  await Promise.all(procs.map((p) => terminate(p.child)));
  for (const p of procs) rmSync(p.dir, { recursive: true, force: true });
}
