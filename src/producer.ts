/**
 * `user-mirror/producer`: what a service needs to enqueue member removals,
 * and nothing else. It loads BullMQ and ioredis but not better-sqlite3 (no
 * native build on a producer's host) nor the sync, replica or stand-in.
 */
export {
  enqueueMemberRemoval,
  enqueueMemberRemovals,
  InvalidRemovalRequestError,
  InvalidRemovalRequest,
  PRODUCER_WAIT_MS,
  type EnqueuedRemoval,
  type EnqueueOptions,
  type RemovalQueueTarget,
} from '../jobs/removals/producer.js';
export { createRemovalQueue, type RemovalQueue, type RemovalQueueOptions } from '../jobs/removals/queue-handle.js';
export {
  REMOVE_MEMBER_JOB,
  RemovalPayloadSchema,
  checkRemovalPayload,
  removalDedupId,
  removalQueueName,
  type ManagementTarget,
  type RemovalPayload,
  type RemovalRequest,
  type RemovalResult,
  type RemovalJobPolicy,
} from '../jobs/removals/contract.js';
// The public name for a queue's management target; jobs/url-target.ts serves the webhook queue too.
export { urlTarget as managementTarget } from '../jobs/url-target.js';
export {
  createRedisConnection,
  readQueueSettings,
  type QueueSettings,
  RedisUnavailableError,
  type RedisClient,
  type RedisEndpoint,
} from '../jobs/redis-connection.js';
