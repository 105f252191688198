/**
 * A Redis Cluster for tests: N masters (no replicas), each its own
 * `redis-server` (from PATH) on a free port in its own temporary directory,
 * joined with `redis-cli --cluster create`, configured like production
 * (AOF with `appendfsync always` unless asked for `everysec`, `noeviction`). Resolves only once every
 * node reports `cluster_state:ok`, so the first command of a test never
 * races slot assignment.
 *
 * No redis-server or redis-cli on PATH is an error that says what to do.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './redis-server.js';

export interface TestCluster {
  /** The masters, all on 127.0.0.1. */
  nodes: Array<{ host: string; port: number }>;
  /** Comma-separated host:port list, the value of REDIS_CLUSTER_NODES. */
  nodesEnv: string;
  /** SIGTERMs every node and removes their directories. */
  stop(): Promise<void>;
}

type Node = { port: number; dir: string; child: ChildProcess; stderr: () => string };

const HOST = '127.0.0.1';
const running = new Set<ChildProcess>();

// A test process that dies must not leave cluster nodes behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startTestCluster(options: { masters?: number; appendfsync?: 'always' | 'everysec' } = {}): Promise<TestCluster> {
  const masters = options.masters ?? 3;
  // redis-cli refuses to create a cluster of fewer than 3 masters.
  if (!Number.isInteger(masters) || masters < 3) throw new Error(`a test cluster needs at least 3 masters, got ${masters}`);

  const nodes: Node[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => terminate(n.child)));
    for (const n of nodes) rmSync(n.dir, { recursive: true, force: true });
  };
  try {
    // Sequential: freePort only promises a port is free now, so parallel
    // calls could hand out the same one before any server binds it.
    for (let i = 0; i < masters; i++) nodes.push(await launchNode(options.appendfsync ?? 'always'));
    const addresses = nodes.map((n) => `${HOST}:${n.port}`);
    const created = await cli(['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], 60_000);
    if (created.code !== 0) {
      throw new Error(`redis-cli --cluster create ${addresses.join(' ')} failed (exit ${created.code}):\n${created.out}\n${created.err}${diagnostics(nodes)}`);
    }
    await waitForClusterOk(nodes, 20_000);
  } catch (error) {
    await stop();
    throw error;
  }
  const listed = nodes.map((n) => ({ host: HOST, port: n.port }));
  return { nodes: listed, nodesEnv: listed.map((n) => `${n.host}:${n.port}`).join(','), stop };
}

async function waitForClusterOk(nodes: Node[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = new Map<number, string>();
  while (Date.now() < deadline) {
    const replies = await Promise.all(nodes.map((n) => cli(['-p', String(n.port), 'cluster', 'info'], 3_000)));
    last = new Map(nodes.map((n, i) => [n.port, (replies[i]?.out ?? '') + (replies[i]?.err ?? '')]));
    if (replies.every((r) => r.out.includes('cluster_state:ok'))) return;
    await sleep(200);
  }
  const states = [...last].map(([port, info]) => `${port}: ${/cluster_state:\w+/.exec(info)?.[0] ?? info.trim()}`);
  throw new Error(`cluster did not reach cluster_state:ok within ${timeoutMs / 1000} s (${states.join('; ')})${diagnostics(nodes)}`);
}

async function launchNode(fsync: 'always' | 'everysec'): Promise<Node> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-cluster-'));
  const port = await freePort();
  // The bus defaults to port + 10000, which may be taken or above 65535 for
  // an ephemeral port: pick it explicitly (cluster-port, Redis >= 7).
  let busPort = await freePort();
  while (busPort === port) busPort = await freePort();
  const args = [
    '--port', String(port), '--bind', HOST, '--daemonize', 'no', '--dir', dir, '--logfile', join(dir, 'redis.log'),
    '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000',
    '--cluster-port', String(busPort),
    '--appendonly', 'yes', '--appendfsync', fsync, '--maxmemory-policy', 'noeviction', '--save', '',
  ];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  running.add(child);
  child.once('exit', () => running.delete(child));
  const node: Node = { port, dir, child, stderr: () => stderr };
  const fail = async (why: string, logs = true): Promise<never> => {
    await terminate(child, 'SIGKILL');
    const detail = logs ? diagnostics([node]) : '';
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${why}${detail}`);
  };

  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const failed: NodeJS.ErrnoException | undefined = await Promise.race([spawnError, sleep(50).then(() => undefined)]);
    if (failed?.code === 'ENOENT') return fail('redis-server is not on PATH: install Redis (e.g. apt-get install redis-server)', false);
    if (failed !== undefined) return fail(`cluster node failed to start on port ${port}: ${failed.message}`);
    if (child.exitCode !== null) return fail(`cluster node on port ${port} exited with ${child.exitCode}`);
    const pong = await cli(['-p', String(port), 'ping'], 1_000);
    if (pong.out.startsWith('PONG')) return node;
    if (pong.code === 127) return fail(pong.err, false);
  }
  return fail(`cluster node did not answer on port ${port} within 10 s`);
}

/** Runs redis-cli against 127.0.0.1; never rejects, so callers can poll. */
function cli(args: string[], timeoutMs: number): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile('redis-cli', ['-h', HOST, ...args], { timeout: timeoutMs }, (error, out, err) => {
      if ((error as NodeJS.ErrnoException | null)?.code === 'ENOENT') {
        resolve({ code: 127, out: '', err: 'redis-cli is not on PATH: install Redis (e.g. apt-get install redis-tools)' });
        return;
      }
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      resolve({ code, out: String(out), err: String(err) || (error?.message ?? '') });
    });
  });
}

/** Each node's stderr and log tail, for errors that must say why. */
function diagnostics(nodes: Node[]): string {
  return nodes
    .map((n) => {
      let log = '';
      try {
        log = readFileSync(join(n.dir, 'redis.log'), 'utf8').trimEnd().split('\n').slice(-15).join('\n');
      } catch {
        log = '(no log)';
      }
      return `\n--- node ${n.port} (${n.child.exitCode ?? n.child.signalCode ?? 'running'}) stderr: ${n.stderr().trim() || '(none)'}\n${log}`;
    })
    .join('');
}

async function terminate(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  // A node stuck in shutdown must not hang the test run.
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
