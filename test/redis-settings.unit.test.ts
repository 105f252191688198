/**
 * Where the queues live: one of a single node, a cluster or a Sentinel set,
 * checked as a whole (redis-connection.ts). Pure: no Redis.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, SECRET_ENV } from '../src/runtime/config.js';
import { describeRedis, readQueueSettings } from '../jobs/redis-connection.js';

const problems = (env: NodeJS.ProcessEnv): string[] => {
  try {
    readQueueSettings(env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems];
    throw err;
  }
};

describe('queue settings', () => {
  it('defaults to the local single node and the plain prefix', () => {
    expect(readQueueSettings({})).toEqual({ endpoint: { mode: 'single', url: 'redis://127.0.0.1:6379' }, prefix: 'user-mirror' });
  });

  it('reads a cluster with a hash-tagged prefix', () => {
    const s = readQueueSettings({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, 10.0.0.2:7000,[::1]:7001', QUEUE_PREFIX: '{user-mirror}' });
    expect(s.prefix).toBe('{user-mirror}');
    expect(s.endpoint).toMatchObject({
      mode: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 7000 },
        { host: '::1', port: 7001 },
      ],
    });
  });

  it('refuses a cluster whose prefix has no hash tag, and says why', () => {
    const p = problems({ REDIS_CLUSTER_NODES: '10.0.0.1:7000' });
    expect(p).toEqual([
      expect.stringMatching(/^QUEUE_PREFIX: on a Redis Cluster must contain a hash tag, e\.g\. \{user-mirror\}: .*one slot/),
    ]);
  });

  it('accepts one hash tag anywhere in the prefix, and nothing else with braces', () => {
    expect(readQueueSettings({ QUEUE_PREFIX: 'prod-{um}' }).prefix).toBe('prod-{um}');
    expect(problems({ QUEUE_PREFIX: '{a}{b}' })).toEqual([expect.stringMatching(/^QUEUE_PREFIX: .*at most one \{hash tag\}/)]);
    expect(problems({ QUEUE_PREFIX: 'a:b' })).toEqual([expect.stringMatching(/^QUEUE_PREFIX: /)]);
  });

  it('reads a Sentinel set, and needs its master name', () => {
    expect(
      readQueueSettings({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster', REDIS_PASSWORD: 'pw', REDIS_TLS: 'true' })
        .endpoint,
    ).toMatchObject({
      mode: 'sentinel',
      name: 'mymaster',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26379 },
      ],
      auth: { password: 'pw', tls: true },
    });
    expect(problems({ REDIS_SENTINELS: 's1:26379' })).toEqual([
      expect.stringMatching(/^REDIS_SENTINEL_NAME: is required with REDIS_SENTINELS/),
    ]);
  });

  it('refuses two topologies at once, and cluster credentials on a single node', () => {
    expect(problems({ REDIS_URL: 'redis://a:6379', REDIS_CLUSTER_NODES: 'b:7000', QUEUE_PREFIX: '{x}' })).toEqual([
      expect.stringMatching(/^REDIS_URL, REDIS_CLUSTER_NODES: set only one of them/),
    ]);
    expect(problems({ REDIS_PASSWORD: 'pw' })).toEqual([
      expect.stringMatching(/^REDIS_PASSWORD: only with REDIS_CLUSTER_NODES or REDIS_SENTINELS/),
    ]);
  });

  it('names a bad node list without echoing it', () => {
    const p = problems({ REDIS_CLUSTER_NODES: 'good:7000,secret-ish value', QUEUE_PREFIX: '{x}' });
    expect(p).toEqual(['REDIS_CLUSTER_NODES: must be a comma-separated list of host:port (item 2 is not)']);
  });

  it('describes every topology without credentials', () => {
    expect(describeRedis('rediss://user:pw@cache.example.com:6380/2')).toBe('rediss://cache.example.com:6380/2');
    const sentinel = readQueueSettings({
      REDIS_SENTINELS: 's1:26379',
      REDIS_SENTINEL_NAME: 'm',
      REDIS_PASSWORD: 'hunter2',
      REDIS_TLS: '1',
    }).endpoint;
    expect(describeRedis(sentinel)).toBe('rediss sentinel m via s1:26379');
    expect(describeRedis(sentinel)).not.toContain('hunter2');
    expect(SECRET_ENV.has('REDIS_PASSWORD')).toBe(true);
    expect(SECRET_ENV.has('REDIS_SENTINEL_PASSWORD')).toBe(true);
  });
});
