/**
 * Which Redis may hold removal jobs, decided without I/O.
 */
import { describe, expect, it } from 'vitest';
import {
  decideRemovalGate,
  describeRemovalGate,
  durabilityFactsFrom,
  judgeRedisDurability,
  parseRedisInfo,
  type RedisDurabilityFacts,
} from '../jobs/redis-durability.js';
import { readConfig } from '../src/runtime/config.js';

const DURABLE: RedisDurabilityFacts = { aofEnabled: true, appendfsync: 'everysec', maxmemoryPolicy: 'noeviction' };

describe('judgeRedisDurability', () => {
  it('AOF on and noeviction is durable', () => {
    expect(judgeRedisDurability(DURABLE)).toEqual({
      durable: true,
      reasons: [],
      warnings: [],
      settings: { appendonly: 'yes', appendfsync: 'everysec', maxmemoryPolicy: 'noeviction' },
    });
  });

  it('AOF off is not durable, whatever the snapshots', () => {
    const v = judgeRedisDurability({ ...DURABLE, aofEnabled: false });
    expect(v.durable).toBe(false);
    expect(v.reasons).toEqual([expect.stringMatching(/AOF persistence is off/)]);
  });

  it.each(['allkeys-lru', 'volatile-lru', 'allkeys-random', 'volatile-ttl', 'allkeys-lfu'])(
    'eviction policy %s is not durable',
    (policy) => {
      const v = judgeRedisDurability({ ...DURABLE, maxmemoryPolicy: policy });
      expect(v.durable).toBe(false);
      expect(v.reasons).toEqual([expect.stringContaining(`maxmemory-policy is ${policy}, not noeviction`)]);
    },
  );

  it('both problems are named', () => {
    expect(judgeRedisDurability({ aofEnabled: false, appendfsync: undefined, maxmemoryPolicy: 'allkeys-lru' }).reasons).toHaveLength(2);
  });

  it('a fact Redis would not report counts against durability, with why', () => {
    const v = judgeRedisDurability({
      aofEnabled: undefined,
      appendfsync: undefined,
      maxmemoryPolicy: undefined,
      readError: 'INFO refused: NOPERM',
    });
    expect(v.durable).toBe(false);
    expect(v.reasons.join(' ')).toMatch(/did not report whether AOF is on \(INFO refused: NOPERM\)/);
    expect(v.settings).toEqual({ appendonly: 'unknown', appendfsync: 'unknown', maxmemoryPolicy: 'unknown' });
  });

  it('appendfsync no is a warning, not a reason to hold', () => {
    const v = judgeRedisDurability({ ...DURABLE, appendfsync: 'no' });
    expect(v.durable).toBe(true);
    expect(v.warnings).toEqual([expect.stringMatching(/appendfsync is no/)]);
  });

  it('unknown appendfsync (CONFIG refused) is fine when AOF is on', () => {
    expect(judgeRedisDurability({ ...DURABLE, appendfsync: undefined }).durable).toBe(true);
  });
});

describe('decideRemovalGate', () => {
  it('runs on a durable Redis', () => {
    const gate = decideRemovalGate(judgeRedisDurability(DURABLE), false);
    expect(gate).toMatchObject({ state: 'run', volatileAllowed: false });
    expect(describeRemovalGate(gate)).toBe('ok');
  });

  it('holds on a volatile Redis, and says why and how to fix it', () => {
    const gate = decideRemovalGate(judgeRedisDurability({ ...DURABLE, aofEnabled: false }), false);
    expect(gate.state).toBe('held');
    const text = describeRemovalGate(gate);
    expect(text).toMatch(/^held: AOF persistence is off/);
    expect(text).toContain('appendonly yes');
    expect(text).toContain('maxmemory-policy noeviction');
    expect(text).toContain('ALLOW_VOLATILE_REDIS=1');
  });

  it('runs on a volatile Redis when the operator allows it, and says so', () => {
    const gate = decideRemovalGate(judgeRedisDurability({ ...DURABLE, maxmemoryPolicy: 'allkeys-lru' }), true);
    expect(gate).toMatchObject({ state: 'run', volatileAllowed: true });
    expect(describeRemovalGate(gate)).toMatch(/^running on a volatile Redis \(ALLOW_VOLATILE_REDIS=1\): maxmemory-policy is allkeys-lru/);
  });
});

describe('INFO parsing', () => {
  const info = [
    '# Persistence',
    'loading:0',
    'rdb_changes_since_last_save:12',
    'aof_enabled:1',
    'aof_rewrite_in_progress:0',
    '',
    '# Memory',
    'used_memory:1048576',
    'maxmemory:0',
    'maxmemory_policy:noeviction',
    '',
  ].join('\r\n');

  it('reads aof_enabled and maxmemory_policy', () => {
    expect(durabilityFactsFrom(parseRedisInfo(info), undefined)).toEqual({
      aofEnabled: true,
      appendfsync: undefined,
      maxmemoryPolicy: 'noeviction',
      readError: undefined,
    });
  });

  it('falls back to CONFIG for the policy when INFO does not carry it', () => {
    const facts = durabilityFactsFrom(
      parseRedisInfo('aof_enabled:0\n'),
      new Map([
        ['maxmemory-policy', 'allkeys-lru'],
        ['appendfsync', 'everysec'],
      ]),
    );
    expect(facts).toMatchObject({ aofEnabled: false, maxmemoryPolicy: 'allkeys-lru', appendfsync: 'everysec' });
  });
});

describe('ALLOW_VOLATILE_REDIS', () => {
  it('defaults to off and accepts 1/0, true/false, yes/no', () => {
    expect(readConfig(['ALLOW_VOLATILE_REDIS'], {}).ALLOW_VOLATILE_REDIS).toBe(false);
    for (const on of ['1', 'true', 'yes'])
      expect(readConfig(['ALLOW_VOLATILE_REDIS'], { ALLOW_VOLATILE_REDIS: on }).ALLOW_VOLATILE_REDIS).toBe(true);
    for (const off of ['0', 'false', 'no', ''])
      expect(readConfig(['ALLOW_VOLATILE_REDIS'], { ALLOW_VOLATILE_REDIS: off }).ALLOW_VOLATILE_REDIS).toBe(false);
  });

  it('refuses anything else, by name', () => {
    expect(() => readConfig(['ALLOW_VOLATILE_REDIS'], { ALLOW_VOLATILE_REDIS: 'maybe' })).toThrow(
      /ALLOW_VOLATILE_REDIS: must be 1, 0, true, false, yes or no/,
    );
  });
});
