/**
 * A Redis Cluster for tests: N masters (no replicas), each its own
 * `redis-server` (redis-process.ts), joined with `redis-cli --cluster
 * create`, configured like production (AOF with `appendfsync always` unless
 * asked for `everysec`, `noeviction`). Resolves only once every node reports
 * `cluster_state:ok`, so the first command of a test never races slot
 * assignment.
 */
import { join } from 'node:path';
import { freePort } from './redis-server.js';
import { HOST, diagnostics, launchRedis, redisCli, stopAll, waitFor, type RedisProcess } from './redis-process.js';

export interface TestCluster {
  /** The masters, all on 127.0.0.1. */
  nodes: Array<{ host: string; port: number }>;
  /** Comma-separated host:port list, the value of REDIS_CLUSTER_NODES. */
  nodesEnv: string;
  /** SIGTERMs every node and removes their directories. */
  stop(): Promise<void>;
}

export async function startTestCluster(options: { masters?: number; appendfsync?: 'always' | 'everysec' } = {}): Promise<TestCluster> {
  const masters = options.masters ?? 3;
  // redis-cli refuses to create a cluster of fewer than 3 masters.
  if (!Number.isInteger(masters) || masters < 3) throw new Error(`a test cluster needs at least 3 masters, got ${masters}`);
  const fsync = options.appendfsync ?? 'always';

  const nodes: RedisProcess[] = [];
  const stop = () => stopAll(nodes);
  try {
    for (let i = 0; i < masters; i++) {
      nodes.push(
        await launchRedis(`cluster node ${i + 1}`, async (port, dir) => {
          // The bus defaults to port + 10000, which may be taken or above 65535 for
          // an ephemeral port: pick it explicitly (cluster-port, Redis >= 7).
          let busPort = await freePort();
          while (busPort === port) busPort = await freePort();
          return [
            '--port',
            String(port),
            '--bind',
            HOST,
            '--daemonize',
            'no',
            '--dir',
            dir,
            '--logfile',
            join(dir, 'redis.log'),
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-node-timeout',
            '2000',
            '--cluster-port',
            String(busPort),
            '--appendonly',
            'yes',
            '--appendfsync',
            fsync,
            '--maxmemory-policy',
            'noeviction',
            '--save',
            '',
          ];
        }),
      );
    }
    const addresses = nodes.map((n) => `${HOST}:${n.port}`);
    await redisCli(undefined, ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], 60_000).catch(
      (err: Error) => {
        throw new Error(`redis-cli --cluster create ${addresses.join(' ')} failed: ${err.message}${diagnostics(nodes)}`);
      },
    );
    for (const n of nodes) {
      await waitFor(20_000, `cluster_state:ok on ${n.port}`, nodes, async () =>
        (await redisCli(n.port, ['cluster', 'info'])).includes('cluster_state:ok'),
      );
    }
  } catch (error) {
    await stop();
    throw error;
  }
  const listed = nodes.map((n) => ({ host: HOST, port: n.port }));
  return { nodes: listed, nodesEnv: listed.map((n) => `${n.host}:${n.port}`).join(','), stop };
}
