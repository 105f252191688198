/**
 * The facts `user-mirror status` gathers (src/commands/status.ts) and the
 * report is built from (./status-report.ts): the mirror's runs and files,
 * the queues, the change feed, the sync jobs.
 */
import type { DiskVerdict } from './disk-verdict.js';
import type { CandidateCounts } from '../../db/sync-runs.js';
import type { CheckpointMode } from '../../db/open.js';
import type { WalIndexFigures } from '../../db/wal-index.js';
import type { BackupVerdict } from './backup-folder.js';
import type { ExportVerdict } from '../export/scheduled.js';
import type { RemovalGate } from '../../jobs/redis-durability.js';
import type { RunTrouble } from './staleness.js';
import type { RunFindings } from '../../db/run-findings.js';
import type { RunDrift } from '../../db/schema-drift.js';
import type { EndpointFailure } from '../../jobs/webhooks/delivery-state.js';
import type { NewestRestore } from '../../db/lineage.js';
import type { Leftover, ReplacedFiles } from './restore-files.js';

export interface RunFacts {
  id: number;
  status: string;
  startedAt: string;
  finishedAt: string | null;
  usersSeen: number;
  created: number;
  updated: number;
  deleted: number;
  /** What became of the users the run's listing did not show. */
  candidates: CandidateCounts;
  /** What the listing did that it should not: identity conflicts, oversize pages, a `total` that fell mid-scan. */
  anomalies: RunAnomalies;
  totalAtStart: number | null;
  error: string | null;
}

interface RunAnomalies {
  identityConflicts: number;
  oversizePages: number;
  totalLowest: number | null;
}

export interface QueueCounts {
  waiting: number;
  active: number;
  delayed: number;
  failed: number;
  completed: number;
}

/** The removal queue of MANAGEMENT_URL's target, across every host; null when MANAGEMENT_URL is unset. */
interface RemovalQueueFacts {
  target: { id: string; url: string; queue: string };
  counts: QueueCounts;
  /** Recent outcomes per host whose worker (and audit) recorded them. */
  hosts: Array<{ host: string; total: number; outcomes: Record<string, number> }>;
}

/** The webhook queue of WEBHOOK_URL's target; null when WEBHOOK_URL is unset. */
interface WebhookQueueFacts {
  target: { id: string; url: string; queue: string };
  counts: QueueCounts;
  /** The highest cursor handed to the queue, and the highest settled (delivered, or failed for good) in order. */
  dispatched: number;
  settled: number;
  /** The endpoint failing (a redirect, 401, 403, 404, 410, DNS, TLS: deliveries held), or null. */
  endpoint: EndpointFailure | null;
  /** The first event the worker is retrying (a timeout, a 5xx, a refused connection), or null: what holds the queue. */
  retrying?: RetryingDelivery | null;
}

/** A webhook delivery being retried, from its job's progress (jobs/webhooks/contract.ts `WebhookProgress`). */
export interface RetryingDelivery {
  eventId: string;
  cursor: number;
  attempts: number;
  /** The last failed attempt: `status 503`, or the network error (a timeout). */
  last: string;
}

/** Whether the removal audit (AUDIT_DB) can be written now (src/runtime/writable-file.ts). */
export interface AuditFacts {
  path: string;
  exists: boolean;
  /** Why it cannot be written; undefined when it can. */
  problem: string | undefined;
}

/** The mirror's change feed (db/change-feed.ts); null when the mirror has none yet. */
export interface FeedFacts {
  latest: number;
  oldest: number | null;
  prunedThrough: number;
  /** When the oldest event not yet settled by the webhook was published; undefined when none or unknown. */
  oldestUnsettledAt?: string | undefined;
}

export type QueueFacts =
  | {
      reachable: true;
      sync: QueueCounts;
      /** The daemon's newest finished sync job: a failure here with no run row is a sync that could not even record itself (a full disk). */
      lastSyncJob?: SyncJobFacts | null;
      removals: RemovalQueueFacts | null;
      webhooks?: WebhookQueueFacts | null;
      /** Jobs of an older producer that name no target: no worker takes them (jobs/removals/unbound.ts). */
      unboundRemovals: number;
    }
  | { reachable: false; error: string };

/** A finished sync job as BullMQ keeps it (a day): when, and why it failed. */
export interface SyncJobFacts {
  finishedAt: string;
  failedReason: string | null;
}

/** Field warnings of active users, per field path as stored. */
export interface FieldWarningFacts {
  users: number;
  byField: Array<{ field: string; users: number }>;
}

export type MirrorFacts =
  | {
      available: true;
      /** Undefined for a mirror not yet migrated to field_warnings. */
      fieldWarnings?: FieldWarningFacts | undefined;
      activeUsers: number;
      deletedUsers: number;
      lastSucceededAt: Date | undefined;
      lastRuns: RunFacts[];
      /** Failed removals recorded in the audit; undefined when there is no audit table. */
      failedRemovalsInAudit: number | undefined;
      /** The change feed's extent; null for a mirror written before it. */
      feed?: FeedFacts | null;
      /** What the newest published run could not make agree with the listing (db/run-findings.ts); undefined before one. */
      findings?: RunFindings | undefined;
      /** The newest published run's schema drift (db/schema-drift.ts); undefined before one or on an older mirror. */
      schemaDrift?: RunDrift | undefined;
      /** What went wrong since the last success (see staleness.ts). */
      lastProblem?: RunTrouble | undefined;
      running?: RunTrouble | undefined;
      /** The newest restore of the file (db/lineage.ts); undefined for a file never restored. */
      restore?: NewestRestore | undefined;
      /** On a follower: when its last succeeded run's data was read from the service (docs/followers.md). */
      sourceAt?: Date | undefined;
      /**
       * Sizes of the mirror's file and WAL (undefined for an in-memory mirror); `freeBytes`: the file's
       * free pages, reused by later syncs; `walIndex`: the WAL's frames and those not yet in the file.
       */
      files?: { mirrorBytes: number; walBytes: number; freeBytes?: number; walIndex?: WalIndexFigures | undefined } | undefined;
    }
  | { available: false; error: string };

export type BackupFacts = BackupVerdict & { dir: string; cron: string };
export type ExportFacts = ExportVerdict & { dir: string; cron: string };

/** What restores left beside the mirror (./restore-files.ts): killed restores' copies (and whether their pid runs), replaced files. */
export interface RestoreFileFacts {
  leftovers: Array<Leftover & { running: boolean }>;
  replaced: ReplacedFiles | null;
}

export interface StatusFacts {
  /** What restores left beside the mirror; undefined when not looked at. */
  restoreFiles?: RestoreFileFacts | undefined;
  /** Scheduled backups (BACKUP_DIR): the folder, the schedule and the verdict; undefined without BACKUP_DIR. */
  backups?: BackupFacts | undefined;
  /** Scheduled exports (EXPORT_DIR); undefined without EXPORT_DIR. */
  exports?: ExportFacts | undefined;
  mirrorPath: string;
  mirrorId: string;
  now: Date;
  scheduleIntervalMs: number;
  /** SYNC_STALE_AFTER_MS as resolved (staleness.ts `staleAfterMs`). */
  staleAfterMs: number;
  mirror: MirrorFacts;
  queues: QueueFacts;
  /** Whether Redis keeps queued jobs (removals, webhooks); undefined when Redis could not be asked. */
  removalGate?: RemovalGate | undefined;
  /** MANAGEMENT_URL is set: this estate runs removals, so Redis matters to `status`'s verdict. */
  removalsConfigured: boolean;
  feed?: FeedFacts | null;
  /** WEBHOOK_URL is set: Redis matters to the verdict, as for removals. */
  webhooksConfigured?: boolean;
  /** WEBHOOK_LAG_WARN_SECONDS: delivery further behind than this needs an operator; undefined: the default. */
  webhookLagWarnSeconds?: number | undefined;
  /** The removal audit's writability; undefined when not looked at. */
  audit?: AuditFacts | undefined;
  /** MIRROR_WAL_WARN_BYTES; undefined: the default (walVerdict). */
  walWarnBytes?: number | undefined;
  /** The file system holding MIRROR_DB, judged against MIRROR_DISK_WARN_BYTES; undefined when it cannot be read. */
  disk?: DiskVerdict | undefined;
  /** MIRROR_CHECKPOINTS; undefined: `after-sync`. */
  checkpoints?: CheckpointMode | undefined;
  /**
   * The record kept beside the mirror (src/sync/attempt-record.ts): a failure
   * the mirror could not record in itself, or the last checkpoint's figures.
   */
  recordBeside?:
    | {
        at: string;
        what: 'ok' | 'sync' | 'checkpoint';
        reason: string;
        checkpoint?: { at: string; walFrames: number; copiedFrames: number };
        /** A `sync` record of the mirror file deleted or replaced under the running daemon (src/daemon/mirror-watch.ts). */
        lost?: { what: 'deleted' | 'replaced' };
      }
    | undefined;
}
