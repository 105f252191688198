/**
 * The package's public API. Other services import from `user-mirror` to
 * enqueue member removals without knowing BullMQ job options.
 */
export {
  enqueueMemberRemoval,
  enqueueMemberRemovals,
  InvalidRemovalRequestError,
  InvalidRemovalRequest,
  type EnqueuedRemoval,
  type EnqueueOptions,
  PRODUCER_WAIT_MS,
  type RemovalQueueTarget,
} from '../jobs/removals/producer.js';
export { createRemovalQueue, type RemovalQueue, type RemovalQueueOptions } from '../jobs/removals/queue-handle.js';
export {
  UNBOUND_REMOVAL_QUEUE,
  REMOVE_MEMBER_JOB,
  removalQueueName,
  type ManagementTarget,
  RemovalPayloadSchema,
  checkRemovalPayload,
  removalDedupId,
  type RemovalPayload,
  type RemovalRequest,
  type RemovalResult,
  type RemovalJobPolicy,
} from '../jobs/removals/contract.js';
// The public name for a queue's management target; jobs/url-target.ts serves the webhook queue too.
export { urlTarget as managementTarget } from '../jobs/url-target.js';
export { startRemovalWorker, type RemovalWorkerHandle, type RemovalWorkerOptions, type RemovalCounters } from '../jobs/removals/worker.js';
export type { RemovalOutcome, MemberRemover } from '../jobs/removals/remove-member.js';
export {
  createRedisConnection,
  readQueueSettings,
  type QueueSettings,
  RedisUnavailableError,
  type RedisClient,
  type RedisEndpoint,
} from '../jobs/redis-connection.js';

// The mirror, for other processes: resolve a user offline, or run a sync from code.
export {
  resolveOffline,
  resolveOfflineMany,
  openResolver,
  closeResolvers,
  MirrorMissingError,
  type ResolveOptions,
} from './replica/resolve.js';
export { runSync, type SyncOptions } from './sync/engine.js';
export type { SyncSummary } from './sync/run-summary.js';
export { openMirror } from '../db/open.js';
// The service client and its errors, for callers that talk to the service directly.
export { ServiceClient, type ServiceClientOptions, type ResolveResult, type DeleteMemberResult } from './service/client.js';
export {
  ServiceError,
  HttpError,
  NetworkError,
  TimeoutError,
  TlsError,
  RequestValidationError,
  ResponseValidationError,
} from './service/errors.js';
export { isRetryable } from './service/retry.js';
export { UserSchema, type User } from './service/schemas.js';
export { parseUser, type FieldWarning, type UserParse } from './service/user-record.js';
// The local stand-in service, for other projects' tests.
export { startStandIn, type StandIn, type StandInOptions } from './stand-in/index.js';
// The mirror as files for a lake: typed Parquet (or NDJSON) with a manifest, full, incremental or as of a time.
export { exportMirror, latestManifest, type ExportOptions, type ExportResult } from './export/run.js';
export { ExportRefused, ManifestSchema, type Manifest, type ExportFormat } from './export/plan.js';
export { TABLES as EXPORT_TABLES, type TableName as ExportTable } from './export/tables.js';
