/**
 * A Sentinel-managed Redis for tests: one master, one replica (both AOF with
 * `appendfsync always`, `noeviction`, as in production) and three sentinels
 * (quorum 2), each its own `redis-server` from PATH on a free port in its own
 * temporary directory. Resolves only once the replica is in sync and every
 * sentinel has discovered the replica and the other two sentinels: before
 * that a failover could not be agreed on or would have nobody to promote.
 *
 * No redis-server or redis-cli on PATH is an error that says what to do.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './redis-server.js';

export interface TestSentinel {
  masterName: string;
  sentinels: Array<{ host: string; port: number }>;
  /** Comma-separated host:port list of the sentinels: the value of REDIS_SENTINELS. */
  sentinelsEnv: string;
  /** The master as the sentinels report it (SENTINEL get-master-addr-by-name). */
  currentMaster(): Promise<{ host: string; port: number }>;
  /**
   * SIGKILLs the current master (it stays dead: a crashed primary); resolves
   * once all three sentinels report the promoted replica and it answers as
   * master, rejects after 30 s.
   */
  killMasterAndWaitForFailover(): Promise<{ from: number; to: number }>;
  stop(): Promise<void>;
}

type Proc = { role: string; port: number; dir: string; child: ChildProcess; stderr: () => string };

const HOST = '127.0.0.1';
const MASTER_NAME = 'um-test-master';
// The diskless-sync delay (5 s by default) would hold up the replica's first sync: no use with one replica.
const DATA = ['--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction', '--save', '', '--repl-diskless-sync-delay', '0'];
const running = new Set<ChildProcess>();

// A test process that dies must not leave Redis servers behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startTestSentinel(): Promise<TestSentinel> {
  const procs: Proc[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(procs.map((p) => terminate(p.child)));
    for (const p of procs) rmSync(p.dir, { recursive: true, force: true });
  };
  // Sequential launches: each server binds its port before the next freePort.
  try {
    const master = await launch('master', dataNode([]));
    procs.push(master);
    const replica = await launch('replica', dataNode(['--replicaof', HOST, String(master.port)]));
    procs.push(replica);
    for (let i = 1; i <= 3; i++) procs.push(await launch(`sentinel ${i}`, sentinelNode(master.port)));
    await waitFor(20_000, `replica ${replica.port} in sync with master ${master.port}`, procs, async () =>
      (await cli(replica.port, ['info', 'replication'])).includes('master_link_status:up'));
    for (const s of procs.filter((p) => p.role.startsWith('sentinel'))) {
      await waitFor(20_000, `${s.role} (${s.port}) to see the replica and 2 other sentinels`, procs, async () => {
        // redis-cli prints SENTINEL master's map reply as key and value lines.
        const out = `\n${await cli(s.port, ['sentinel', 'master', MASTER_NAME])}`;
        const field = (key: string) => Number(new RegExp(`\n${key}\n(\\d+)`).exec(out)?.[1]);
        return field('num-slaves') >= 1 && field('num-other-sentinels') === 2;
      });
    }
  } catch (error) {
    await stop();
    throw error;
  }

  const sentinels = procs.filter((p) => p.role.startsWith('sentinel')).map((p) => ({ host: HOST, port: p.port }));
  const reported = async (port: number): Promise<number> =>
    Number((await cli(port, ['sentinel', 'get-master-addr-by-name', MASTER_NAME]).catch(() => '')).trim().split('\n')[1]);
  const currentMaster = async (): Promise<{ host: string; port: number }> => {
    const port = (await Promise.all(sentinels.map((s) => reported(s.port)))).find((p) => p > 0);
    if (port === undefined) throw new Error(`no sentinel (${sentinels.map((s) => s.port).join(', ')}) reports a master${diagnostics(procs)}`);
    return { host: HOST, port };
  };
  return {
    masterName: MASTER_NAME,
    sentinels,
    sentinelsEnv: sentinels.map((s) => `${s.host}:${s.port}`).join(','),
    currentMaster,
    async killMasterAndWaitForFailover() {
      const from = (await currentMaster()).port;
      const victim = procs.find((p) => p.port === from && p.child.exitCode === null && p.child.signalCode === null);
      if (victim === undefined) throw new Error(`the sentinels report master ${from}, which is not a running server of this topology`);
      await terminate(victim.child, 'SIGKILL');
      let to = from;
      // Wait for all three to agree: a client asking a sentinel that has not
      // heard of the failover yet would be sent to the dead master.
      await waitFor(30_000, `all sentinels to report a master other than ${from}`, procs, async () => {
        const ports = await Promise.all(sentinels.map((s) => reported(s.port)));
        to = ports[0] ?? from;
        if (to === from || !(to > 0) || ports.some((p) => p !== to)) return false;
        return (await cli(to, ['role'])).startsWith('master');
      });
      return { from, to };
    },
    stop,
  };
}

function sentinelNode(masterPort: number): (port: number, dir: string) => string[] {
  return (port, dir) => {
    // Sentinel rewrites its config file (myid, discovered replicas and
    // sentinels, failovers), so each needs its own writable one.
    const conf = join(dir, 'sentinel.conf');
    const lines = [`port ${port}`, `bind ${HOST}`, 'daemonize no', `dir ${dir}`, `logfile ${join(dir, 'redis.log')}`];
    lines.push(`sentinel monitor ${MASTER_NAME} ${HOST} ${masterPort} 2`, `sentinel down-after-milliseconds ${MASTER_NAME} 1000`);
    lines.push(`sentinel failover-timeout ${MASTER_NAME} 5000`, `sentinel parallel-syncs ${MASTER_NAME} 1`);
    writeFileSync(conf, `${lines.join('\n')}\n`);
    return [conf, '--sentinel'];
  };
}

function dataNode(extra: string[]): (port: number, dir: string) => string[] {
  return (port, dir) => ['--port', String(port), '--bind', HOST, '--daemonize', 'no', '--dir', dir, '--logfile', join(dir, 'redis.log'), ...DATA, ...extra];
}

async function launch(role: string, argsFor: (port: number, dir: string) => string[]): Promise<Proc> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-sentinel-'));
  const port = await freePort();
  const child = spawn('redis-server', argsFor(port, dir), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  running.add(child);
  child.once('exit', () => running.delete(child));
  const proc: Proc = { role, port, dir, child, stderr: () => stderr };
  const fail = async (why: string, logs = true): Promise<never> => {
    await terminate(child, 'SIGKILL');
    const detail = logs ? diagnostics([proc]) : '';
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${why}${detail}`);
  };

  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const failed: NodeJS.ErrnoException | undefined = await Promise.race([spawnError, sleep(50).then(() => undefined)]);
    if (failed?.code === 'ENOENT') return fail('redis-server is not on PATH: install Redis (e.g. apt-get install redis-server)', false);
    if (failed !== undefined) return fail(`${role} failed to start on port ${port}: ${failed.message}`);
    if (child.exitCode !== null) return fail(`${role} on port ${port} exited with ${child.exitCode}`);
    const pong = await cli(port, ['ping']).catch((e: Error) => e);
    if (pong instanceof Error && pong.message.includes('not on PATH')) return fail(pong.message, false);
    if (typeof pong === 'string' && pong.startsWith('PONG')) return proc;
  }
  return fail(`${role} did not answer on port ${port} within 10 s`);
}

async function waitFor(timeoutMs: number, what: string, procs: Proc[], ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await ready().catch(() => false)) return;
    await sleep(200);
  }
  throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${diagnostics(procs)}`);
}

/** One command through redis-cli; rejects with its stderr when it fails. */
function cli(port: number, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', HOST, '-p', String(port), ...args], { timeout: 3_000 }, (error, out, err) => {
      if ((error as NodeJS.ErrnoException | null)?.code === 'ENOENT') {
        reject(new Error('redis-cli is not on PATH: install Redis (e.g. apt-get install redis-tools)'));
      } else if (error !== null) {
        reject(new Error(`redis-cli -p ${port} ${args.join(' ')}: ${String(err).trim() || error.message}`));
      } else resolve(String(out));
    });
  });
}

/** Each process's stderr and log tail, for errors that must say why. */
function diagnostics(procs: Proc[]): string {
  const tail = (file: string): string => {
    try {
      return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-12).join('\n');
    } catch {
      return '(no log)';
    }
  };
  const state = (p: Proc) => p.child.exitCode ?? p.child.signalCode ?? 'running';
  return procs.map((p) => `\n--- ${p.role} ${p.port} (${state(p)}) stderr: ${p.stderr().trim() || '(none)'}\n${tail(join(p.dir, 'redis.log'))}`).join('');
}

async function terminate(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  // A server stuck in shutdown must not hang the test run.
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
