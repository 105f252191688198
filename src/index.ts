/**
 * The package's public API. Other services import from `user-mirror` to
 * enqueue member removals without knowing BullMQ job options.
 */
export {
  enqueueMemberRemoval,
  enqueueMemberRemovals,
  createRemovalQueue,
  InvalidRemovalRequest,
  type EnqueuedRemoval,
  type EnqueueOptions,
  type RemovalQueue,
  type RemovalQueueTarget,
} from '../jobs/removal-producer.js';
export {
  REMOVAL_QUEUE,
  REMOVE_MEMBER_JOB,
  RemovalPayloadSchema,
  checkRemovalPayload,
  removalDedupId,
  type RemovalPayload,
  type RemovalRequest,
  type RemovalResult,
  type RemovalJobPolicy,
} from '../jobs/removal-queue.js';
export { startRemovalWorker, type RemovalWorkerHandle, type RemovalWorkerOptions, type RemovalCounters } from '../jobs/removal-worker.js';
export type { RemovalOutcome, MemberRemover } from '../jobs/remove-member.js';
export { createRedisConnection } from '../jobs/redis-connection.js';
