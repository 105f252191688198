/**
 * The Redis Streams kind: each event is `XADD <stream> <cursor>-0 …`, so
 * the stream itself holds the position (its last-generated-id) and Redis
 * refuses a repeated append (an id at or below the top is an error), with
 * no deduplication window to outlive. Entry fields: `event` (the JSON, its
 * field policy applied), `event_id`, `type`, `team_id` ('' for `mirror.*`),
 * `policy` (the field policy's `<name>:<fingerprint>`).
 *
 * A batch is appended by one script that stops at the first refusal, so a
 * prefix lands and never a later event without an earlier one. Retention:
 * `MAXLEN ~ n` or `MINID ~ <cursor - n>`. Connections come from
 * jobs/redis-connection.ts (single node, Cluster, Sentinel, TLS); one key,
 * so a Cluster needs no hash tag for the script (a tag in the stream name
 * only chooses the slot). The stream's Redis must persist: the check of
 * jobs/redis-durability.ts, as for the queues, unless `allow_volatile`.
 */
import type { Logger } from 'pino';
import { createRedisConnection, describeRedis, redisReady, type RedisClient } from '../../jobs/redis-connection.js';
import { readEstateDurability } from '../../jobs/redis-durability.js';
import type { Destination, DestinationPosition, OutgoingEvent, RereadHint } from './contract.js';
import type { RedisStreamSink } from './sinks-file.js';

/** Appends entries in order; the first error ends the script (earlier ones stay: a prefix). Returns how many were added. */
const APPEND = `
local n = 0
local i = 3
while i <= #ARGV do
  local args = { KEYS[1] }
  if ARGV[1] ~= '' then
    args[#args + 1] = ARGV[1]
    args[#args + 1] = '~'
    args[#args + 1] = ARGV[2]
  end
  for j = 0, 10 do args[#args + 1] = ARGV[i + j] end
  redis.call('XADD', unpack(args))
  i = i + 11
  n = n + 1
end
return n
`;

const CONNECT_MS = 10_000;

/** `<cursor>-0`: the entry id of the event at `cursor`. */
function entryId(cursor: number): string {
  return `${cursor}-0`;
}

/** The cursor of an entry id written by entryId; undefined for another (an id user-mirror did not write). */
function cursorOfEntryId(id: string): number | undefined {
  const m = /^([0-9]+)-0$/.exec(id);
  const n = Number(m?.[1]);
  return m !== null && Number.isSafeInteger(n) ? n : undefined;
}

export class RedisStreamDestination implements Destination {
  readonly where: string;
  private client: RedisClient | undefined;

  constructor(
    private readonly sink: RedisStreamSink,
    private readonly log: Logger | undefined,
    private readonly role: 'control' | 'probe' = 'control',
  ) {
    this.where = `${describeRedis(sink.endpoint)} stream ${sink.stream}`;
  }

  async open(): Promise<void> {
    const client = createRedisConnection(this.sink.endpoint, {
      role: this.role,
      ...(this.log === undefined ? {} : { logger: this.log }),
      connectionName: `user-mirror:sink:${this.sink.name}`,
    });
    this.client = client;
    await redisReady(client, CONNECT_MS);
    if (!this.sink.allowVolatile) {
      const verdict = await readEstateDurability(client);
      if (!verdict.durable)
        throw new Error(
          `the stream's Redis can lose it: ${verdict.reasons.join('; ')} (turn on AOF with noeviction, or set "allow_volatile": true on the sink)`,
        );
    }
  }

  private redis(): RedisClient {
    if (this.client === undefined) throw new Error('not open');
    return this.client;
  }

  async position(): Promise<DestinationPosition | null> {
    const redis = this.redis();
    if ((await redis.exists(this.sink.stream)) === 0) return null;
    // The last-generated-id outlives trimming and deletion: XADD refuses anything at or below it.
    const info = (await redis.call('XINFO', 'STREAM', this.sink.stream)) as unknown[];
    const at = info.indexOf('last-generated-id');
    const value = info[at + 1];
    const top = typeof value === 'string' ? value : '0-0';
    if (top === '0-0') return null;
    const cursor = cursorOfEntryId(top);
    if (cursor === undefined)
      throw new Error(
        `stream ${this.sink.stream} holds entry ${top}, not one user-mirror wrote (<cursor>-0): give the sink its own stream`,
      );
    const last = (await redis.xrevrange(this.sink.stream, '+', '-', 'COUNT', 1))[0];
    let eventId: string | null = null;
    if (last !== undefined && last[0] === top) {
      const fields = last[1];
      const i = fields.indexOf('event_id');
      eventId = i >= 0 && i % 2 === 0 ? (fields[i + 1] ?? null) : null;
    }
    return { cursor, eventId };
  }

  async append(events: readonly OutgoingEvent[]): Promise<void> {
    if (events.length === 0) return;
    const r = this.sink.retention;
    const tail = events[events.length - 1]?.cursor ?? 0;
    const trim =
      r === undefined ? ['', ''] : 'maxlen' in r ? ['MAXLEN', String(r.maxlen)] : ['MINID', entryId(Math.max(0, tail - r.minidBehind))];
    const args: string[] = [...trim];
    for (const e of events)
      args.push(entryId(e.cursor), 'event', e.body, 'event_id', e.id, 'type', e.type, 'team_id', e.teamId ?? '', 'policy', e.policy);
    await this.redis().eval(APPEND, 1, this.sink.stream, ...args);
  }

  async rereadFrom(from: number): Promise<RereadHint> {
    const first = (await this.redis().xrange(this.sink.stream, '-', '+', 'COUNT', 1))[0];
    const oldest = first === undefined ? null : (cursorOfEntryId(first[0]) ?? null);
    const key = `'${this.sink.stream.replace(/'/g, `'\\''`)}'`;
    return {
      oldest,
      how: [
        `redis-cli XRANGE ${key} ${entryId(from)} +          (read from cursor ${from} on)`,
        `redis-cli XGROUP SETID ${key} <group> ${entryId(from - 1)}    (a consumer group's next XREADGROUP '>' starts at cursor ${from})`,
      ],
    };
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    c?.disconnect();
  }
}
