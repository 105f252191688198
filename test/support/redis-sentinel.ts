/**
 * A Sentinel-managed Redis for tests: one master, one replica (both AOF with
 * `appendfsync always`, `noeviction`, as in production) and three sentinels
 * (quorum 2), each its own `redis-server` from PATH on a free port in its own
 * temporary directory (redis-process.ts). Resolves only once the replica is in sync and every
 * sentinel has discovered the replica and the other two sentinels: before
 * that a failover could not be agreed on or would have nobody to promote.
 *
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  HOST,
  diagnostics,
  launchRedis as launch,
  redisCli,
  stopAll,
  terminate,
  waitFor,
  type RedisProcess as Proc,
} from './redis-process.js';

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

const MASTER_NAME = 'um-test-master';
// The diskless-sync delay (5 s by default) would hold up the replica's first sync: no use with one replica.
const DATA = [
  '--appendonly',
  'yes',
  '--appendfsync',
  'always',
  '--maxmemory-policy',
  'noeviction',
  '--save',
  '',
  '--repl-diskless-sync-delay',
  '0',
];

export async function startTestSentinel(): Promise<TestSentinel> {
  const procs: Proc[] = [];
  const stop = () => stopAll(procs);
  // Sequential launches: each server binds its port before the next freePort.
  try {
    const master = await launch('master', dataNode([]));
    procs.push(master);
    const replica = await launch('replica', dataNode(['--replicaof', HOST, String(master.port)]));
    procs.push(replica);
    for (let i = 1; i <= 3; i++) procs.push(await launch(`sentinel ${i}`, sentinelNode(master.port)));
    await waitFor(20_000, `replica ${replica.port} in sync with master ${master.port}`, procs, async () =>
      (await redisCli(replica.port, ['info', 'replication'])).includes('master_link_status:up'),
    );
    for (const s of procs.filter((p) => p.role.startsWith('sentinel'))) {
      await waitFor(20_000, `${s.role} (${s.port}) to see the replica and 2 other sentinels`, procs, async () => {
        // redis-cli prints SENTINEL master's map reply as key and value lines.
        const out = `\n${await redisCli(s.port, ['sentinel', 'master', MASTER_NAME])}`;
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
    Number((await redisCli(port, ['sentinel', 'get-master-addr-by-name', MASTER_NAME]).catch(() => '')).trim().split('\n')[1]);
  const currentMaster = async (): Promise<{ host: string; port: number }> => {
    const port = (await Promise.all(sentinels.map((s) => reported(s.port)))).find((p) => p > 0);
    if (port === undefined)
      throw new Error(`no sentinel (${sentinels.map((s) => s.port).join(', ')}) reports a master${diagnostics(procs)}`);
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
        return (await redisCli(to, ['role'])).startsWith('master');
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
  return (port, dir) => [
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
    ...DATA,
    ...extra,
  ];
}
