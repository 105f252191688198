import { describe, expect, it } from 'vitest';
import { ConfigError } from '../src/runtime/config.js';
import { admits, teamIdOf } from '../src/sinks/contract.js';
import { parseSinks } from '../src/sinks/sinks-file.js';

function problems(json: unknown): string[] {
  try {
    parseSinks(json, {});
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems];
    throw err;
  }
  return [];
}

describe('SINKS_FILE', () => {
  it('reports every problem at once, each by sink name and field, never a value', () => {
    const found = problems({
      sinks: [
        { name: 'bus', kind: 'redis_stream', redis: { url: 'redis://:hunter2@cache:6379' }, stream: 's', retention: { maxlen: 0 } },
        { name: 'js', kind: 'jetstream', servers: ['http://x'], stream: 'a.b', subject_prefix: 'p', password: 'hunter2' },
        { name: 'bus', kind: 'kafka' },
      ],
    });
    expect(found.join('\n')).not.toContain('hunter2');
    expect(found).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/sinks\[0\] "bus"\.redis\.url: must not carry a password/),
        expect.stringMatching(/sinks\[0\] "bus"\.retention(\.maxlen)?: /),
        expect.stringMatching(/sinks\[1\] "js"\.servers\[0\]: must be nats:/),
        expect.stringMatching(/sinks\[1\] "js"\.stream: /),
        expect.stringMatching(/sinks\[1\] "js"\.password: must be \{ "file"/),
        expect.stringMatching(/sinks\[2\] "bus"\.kind: /),
      ]),
    );
  });

  it('names two sinks of one name, a redis without a place, and a sentinel set without its name', () => {
    const found = problems({
      sinks: [
        { name: 'a', kind: 'redis_stream', redis: {}, stream: 's' },
        { name: 'a', kind: 'redis_stream', redis: { sentinels: ['h:26379'] }, stream: 's' },
      ],
    });
    expect(found).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/sinks\[0\] "a"\.redis: needs exactly one of url, cluster_nodes, sentinels/),
        expect.stringMatching(/sinks\[1\] "a"\.redis\.sentinel_name: goes with sentinels/),
        expect.stringMatching(/sinks\[1\] "a"\.name: "a" names two sinks/),
      ]),
    );
  });

  it('refuses a destination beyond loopback without TLS (issue 50: nothing in clear), unless TLS_BY_PROXY says a proxy carries it', () => {
    const file = {
      sinks: [
        { name: 'r', kind: 'redis_stream', redis: { url: 'redis://cache.internal:6379' }, stream: 's' },
        { name: 'c', kind: 'redis_stream', redis: { cluster_nodes: ['10.0.0.5:7000', '127.0.0.1:7001'] }, stream: '{s}' },
        { name: 'j', kind: 'jetstream', servers: ['nats://nats.internal:4222'], stream: 'st', subject_prefix: 'p' },
        { name: 'ok1', kind: 'redis_stream', redis: { url: 'rediss://cache.internal:6380' }, stream: 's' },
        { name: 'ok2', kind: 'jetstream', servers: ['tls://nats.internal:4222'], stream: 'st', subject_prefix: 'q' },
        { name: 'ok3', kind: 'jetstream', servers: ['nats://127.0.0.1:4222'], stream: 'st', subject_prefix: 'r' },
      ],
    };
    const found = problems(file);
    expect(found).toEqual([
      expect.stringMatching(/sinks\[0\] "r"\.redis\.url: cache\.internal is beyond this host .*TLS_BY_PROXY=1/),
      expect.stringMatching(/sinks\[1\] "c"\.redis\.cluster_nodes: 10\.0\.0\.5 is beyond this host/),
      expect.stringMatching(/sinks\[2\] "j"\.servers: nats\.internal is beyond this host/),
    ]);
    expect(parseSinks(file, {}, 'SINKS_FILE', { tlsByProxy: true }).map((s) => s.name)).toEqual(['r', 'c', 'j', 'ok1', 'ok2', 'ok3']);
  });

  it('reads a valid file into settings: the policy compiled, the filter kept', () => {
    const [sink] = parseSinks(
      {
        sinks: [
          {
            name: 'bus',
            kind: 'redis_stream',
            redis: { url: 'redis://127.0.0.1:6390' },
            stream: '{um}:changes',
            filter: { types: ['user.deleted'] },
            field_policy: { fields: { allow: ['user_id'] } },
          },
        ],
      },
      {},
    );
    expect(sink).toMatchObject({ name: 'bus', kind: 'redis_stream', stream: '{um}:changes', filter: { types: ['user.deleted'] } });
    expect(sink?.policy.name).toBe('custom');
  });
});

describe('sink filter', () => {
  it('admits by type and team; mirror.restored reaches every sink; mirror events pass a team filter', () => {
    const f = { types: ['user.created'] as const, teams: ['t1'] };
    expect(admits(f, 'user.created', 't1')).toBe(true);
    expect(admits(f, 'user.created', 't2')).toBe(false);
    expect(admits(f, 'user.deleted', 't1')).toBe(false);
    expect(admits(f, 'mirror.restored', null)).toBe(true);
    expect(admits({ teams: ['t1'] }, 'mirror.baseline', null)).toBe(true);
    expect(admits({ types: ['user.created'] }, 'mirror.baseline', null)).toBe(false);
  });

  it('reads the team id of a stored body, the data one, escapes honoured', () => {
    expect(teamIdOf('{"id":"evt_a_1","data":{"user_id":"u","team_id":"t-1","user":{"team_id":"no"}}}')).toBe('t-1');
    expect(teamIdOf('{"id":"evt_a_1","data":{"user_id":"u\\"team_id\\":\\"x","team_id":"t\\"2"}}')).toBe('t"2');
    expect(teamIdOf('{"id":"evt_a_1","data":{"users":3}}')).toBeNull();
  });
});
