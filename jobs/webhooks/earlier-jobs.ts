/**
 * The guard that keeps delivery in order when a worker dies: a job left
 * active by a worker that died (or by a Redis restart under a rate-limited
 * move) is re-queued by BullMQ's stalled check, at the taking end of `wait`,
 * only once its lock expires. Until then no worker may deliver a later event:
 * a job that finds an earlier one here waits for it (worker.ts). One Lua
 * script, so the look and the move back are atomic against other workers.
 */
import type { RedisClient } from '../redis-connection.js';

/**
 * KEYS: active, wait; ARGV: the queue's key prefix, the job's id, its cursor, its replay ('' for none).
 * Only a job of the same run (the feed's, or the same replay: ./replay.ts) can be earlier: a replay's
 * jobs wait behind later events by design.
 */
const EARLIER_JOBS_LUA = `
local earlier = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if id ~= ARGV[2] then table.insert(earlier, id) end
end
if #earlier > 0 then return earlier end
local front = redis.call('LINDEX', KEYS[2], -1)
if not front then return earlier end
local raw = redis.call('HGET', ARGV[1] .. front, 'data')
if not raw then return earlier end
local ok, data = pcall(cjson.decode, raw)
if not ok or type(data) ~= 'table' or type(data.cursor) ~= 'number' or data.cursor >= tonumber(ARGV[3]) then return earlier end
if tostring(data.replay or '') ~= ARGV[4] then return earlier end
redis.call('LREM', KEYS[2], 1, front)
redis.call('LPUSH', KEYS[1], front)
return { front }
`;

/**
 * Jobs that must be delivered before job `id` (cursor `cursor`): any other
 * active job, or an earlier event at the taking end of `wait`, moved there
 * by the stalled check between this job's take and this look. In one script,
 * so no other worker moves either meanwhile; such a job goes back to
 * `active`, lockless, where the stalled check finds it again (and re-queues
 * it in front of this one, which then waits in `wait`).
 */
export async function earlierJobs(
  connection: RedisClient,
  worker: { toKey(type: string): string } | undefined,
  id: string,
  cursor: number,
  replay?: number,
): Promise<string[]> {
  if (worker === undefined) return [];
  const found = await connection.eval(
    EARLIER_JOBS_LUA,
    2,
    worker.toKey('active'),
    worker.toKey('wait'),
    worker.toKey(''),
    id,
    String(cursor),
    replay === undefined ? '' : String(replay),
  );
  return Array.isArray(found) ? found.filter((x): x is string => typeof x === 'string') : [];
}
