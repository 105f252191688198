/**
 * One sync run's writes, decided here and applied through a MirrorStore
 * (db/mirror-store.ts). The run's ledger (run-ledger.ts) lives here, in this
 * process: a fingerprint of every user active at the start with its content,
 * and of every user listed with other content. So an unchanged listing costs
 * a probe in memory and never reaches the store; the store only sees what
 * changed, and tells the ledger what each written user held before.
 *
 * - A user listed twice in a run keeps its latest listing.
 * - A rejected record whose user_id can be read still counts as seen, so its
 *   user is never a deletion candidate only because its latest record was
 *   malformed.
 * - Rejected records are kept in memory and handed to the store with the
 *   run's final row, so that they describe the run whether it published or
 *   rolled back (up to REJECTED_KEPT records or REJECTED_KEPT_BYTES; beyond,
 *   only counted).
 * - A page that fails to apply breaks the run: the ledger has counted its
 *   records, so publishing would lie. The run can then only fail.
 */
import type { Db } from '../../db/open.js';
import {
  SqliteMirrorStore,
  type MirrorStore,
  type PublishDeletions,
  type PublishResult,
  type SqliteMirrorStoreOptions,
} from '../../db/mirror-store.js';
import type { FinishRunInput, RejectedRow } from '../../db/sync-runs.js';
import { IdentityConflicts } from '../../db/identity-conflicts.js';
import { FirstSyncLedger, RunLedger, type Ledger } from './run-ledger.js';
import { DriftTally } from './drift-tally.js';
import type { RunFieldWarning } from '../../db/schema-drift.js';
import { DEFAULT_MAX_RECORD_BYTES, emptyTally, pageWrites, type PageBytes, type RejectedRecordInput } from './page-decode.js';
import { isRecord } from '../runtime/is-record.js';

export interface StagePageResult {
  /** Records listed and readable: every record of the page but the rejected ones. */
  seen: number;
  /** Records written: new, changed or reappearing users (a repeat listing counts again). */
  changed: number;
  /** Records whose user_id was already seen in this run, this page included: drift. */
  duplicates: number;
  /** Users this page listed for the first time in the run (a first sync's repeats included: its ledger counts user_ids). */
  fresh: number;
  /**
   * Records of this page that name no user it does not name already: a user_id twice in one answer (the
   * service listing it twice, which no paging causes), or none readable. ./listing-check.ts counts them
   * as listed, not as a shortfall of the scan.
   */
  notDistinct: number;
  /** Records set aside (malformed, no identity, oversized): kept with the run's row. */
  rejected: number;
}

/** Rejected records kept per run: a run where every record is malformed must not hold them all in memory. */
const REJECTED_KEPT = 10_000;
const REJECTED_KEPT_BYTES = 32 * 1024 * 1024;

interface OpenRun {
  id: number;
  duplicates: number;
  /** Set while the run can still publish; undefined once published. */
  ledger: Ledger | undefined;
  broken: boolean;
  rejected: RejectedRow[];
  rejectedBytes: number;
  /** Repeat listings under another client_user_id, found here; the store adds those it finds (db/identity-conflicts.ts). */
  conflicts: IdentityConflicts;
  /** The warnings and unknown keys of the records written (./drift-tally.ts), stored with the run's row. */
  schemaDrift: DriftTally;
}

export class RunWriter {
  private run: OpenRun | undefined;

  constructor(
    readonly store: MirrorStore,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  /** Records a run before its first request: `status` shows it `running` while it waits. */
  recordRun(): number {
    this.run = undefined;
    return this.store.recordRun();
  }

  /** The listing's size as the last published run saw it: a re-sync plans its first requests from it (src/sync/engine.ts). */
  lastListedTotal(): number | undefined {
    return this.store.lastListedTotal();
  }

  /** Starts a run (`recorded` by recordRun, or a new one): its transaction, and its ledger from the mirror's active users. */
  beginRun(totalAtStart?: number, recorded?: number): number {
    this.run = undefined;
    const id = this.store.beginRun(totalAtStart, recorded);
    let ledger: Ledger;
    try {
      // Sized once from the listing's total (a re-sync lists few users with new content).
      ledger = this.store.loadsEmptyMirror()
        ? new FirstSyncLedger(totalAtStart ?? 0)
        : new RunLedger(this.store.activeUsers(), undefined, { active: totalAtStart ?? 0, listed: 0 });
    } catch (err) {
      // The run's transaction is open: roll it back and record why, rather than leave it to the next run.
      this.store.finishRun(id, { status: 'failed', pages: 0, usersSeen: 0, error: `could not read the mirror's users: ${String(err)}` });
      throw err;
    }
    this.run = {
      id,
      duplicates: 0,
      ledger,
      broken: false,
      rejected: [],
      rejectedBytes: 0,
      conflicts: new IdentityConflicts(),
      schemaDrift: new DriftTally(),
    };
    return id;
  }

  /**
   * Stages one page, the whole of its trip through the writer: each record's
   * bytes are hashed and shown to the run's ledger, only new and changed
   * records are parsed (page-decode.ts), and what changed is written into
   * the run's transaction (readers see none of it until publish), each
   * record stored before the next is parsed. Records that cannot be stored
   * are kept for the run's row.
   */
  stagePage(runId: number, page: PageBytes, offset: number, maxRecordBytes = DEFAULT_MAX_RECORD_BYTES): StagePageResult {
    const { run, ledger } = this.openLedger(runId);
    const tally = { ...emptyTally(), schemaDrift: run.schemaDrift };
    const distinctBefore = ledger.seenCount;
    // A page's few hundred user_ids, to tell a repeat within the page from one across pages (counted only when it has repeats).
    const inPage: string[] = [];
    let unnamed = 0;
    const note = (userId: string): void => {
      inPage.push(userId);
    };
    // A first write of a user marks its start entry seen; one listed unchanged earlier in the pass was a repeat.
    let settledRepeats = 0;
    try {
      this.store.writeUsers(
        runId,
        pageWrites(
          page,
          offset,
          (userId, digest) => {
            note(userId);
            return ledger.sight(userId, digest);
          },
          tally,
          maxRecordBytes,
        ),
        (write, prior) => {
          const { user } = write.record;
          const settledRepeat = !write.repeat && ledger.settle(user.user_id, prior?.hash);
          if (settledRepeat) settledRepeats++;
          // A repeat's prior row is its earlier listing in this run (written, or unchanged from the start).
          if ((write.repeat || settledRepeat) && prior !== undefined && prior.clientUserId !== user.client_user_id) {
            run.conflicts.add({ kind: 'user_id', userId: user.user_id, earlier: prior.clientUserId, later: user.client_user_id });
          }
        },
      );
    } catch (err) {
      run.broken = true;
      // The run can only fail now; its row still shows what this page set aside.
      for (const rejected of tally.rejected) this.keepRejected(run, rejected);
      throw err;
    }
    for (const rejected of tally.rejected) {
      const userId = this.keepRejected(run, rejected);
      // A record that cannot be stored still shows its user exists: never a deletion candidate.
      if (userId === undefined) {
        unnamed++;
        continue;
      }
      note(userId);
      ledger.sightUnparsed(userId, () => this.store.contentHashOf(userId));
    }
    const duplicates = tally.duplicates + settledRepeats;
    const fresh = ledger.seenCount - distinctBefore;
    run.duplicates += duplicates;
    return {
      seen: tally.seen,
      changed: tally.changed,
      duplicates,
      rejected: tally.rejected.length,
      fresh,
      notDistinct: (fresh < inPage.length ? inPage.length - new Set(inPage).size : 0) + unnamed,
    };
  }

  /** Distinct users the run has listed so far, whatever their records held: what a complete listing is judged by (./listing-check.ts). */
  distinctSeen(runId: number): number {
    return this.openLedger(runId).ledger.distinctCount(() => this.store.firstSyncUserIds());
  }

  /** Keeps a record that failed validation, for diagnosis; written with the run's final row. Returns its user_id, if readable. */
  private keepRejected(run: OpenRun, rejected: RejectedRecordInput): string | undefined {
    const userId = stringField(rejected.raw, 'user_id');
    const raw = JSON.stringify(rejected.raw) ?? 'null';
    if (run.rejected.length < REJECTED_KEPT && run.rejectedBytes + raw.length <= REJECTED_KEPT_BYTES) {
      run.rejected.push({
        offset: rejected.offset,
        index: rejected.index,
        userId: userId ?? null,
        clientUserId: stringField(rejected.raw, 'client_user_id') ?? null,
        reason: rejected.reason,
        raw,
        at: this.clock().toISOString(),
      });
      run.rejectedBytes += raw.length;
    }
    return userId;
  }

  /** Active users not seen in this run so far: the deletion candidates. */
  countUnseenActive(runId: number): number {
    return this.openLedger(runId).ledger.unseenActiveCount;
  }

  /**
   * Up to `limit` of the deletion candidates, for the sync to check upstream
   * (deletions.ts). Picked at random, so that when there are more than
   * a run may check, each is reached by some later run.
   */
  pickUnseenActive(runId: number, limit: number): Array<{ user_id: string; client_user_id: string }> {
    const { ledger } = this.openLedger(runId);
    if (ledger.unseenActiveCount === 0) return [];
    const picked = reservoirSample(this.unseenActiveIds(ledger), Math.max(0, Math.floor(limit)));
    return this.store.clientIdsOf(picked);
  }

  publish(runId: number, deletions: PublishDeletions): PublishResult {
    const { run } = this.openLedger(runId);
    if (run.broken) throw new Error(`sync run ${runId}: a page failed to stage; the run can only fail`);
    // Nothing asks the ledger past this point; let its tens of MB go before the publish's index sorts.
    run.ledger = undefined;
    const published = this.store.publish(runId, deletions);
    run.conflicts.merge(published.conflicts);
    return { ...published, conflicts: run.conflicts.snapshot() };
  }

  /** The rejected records kept so far for the run being written, for its log (./run-log.ts); none for another run. */
  rejectedOf(runId: number): readonly RejectedRow[] {
    return this.run?.id === runId ? this.run.rejected : [];
  }

  /**
   * Records how the run ended, with its rejected records and its schema drift; an unpublished run is rolled back.
   * Returns the drift pairs the mirror met for the first time (none for a failed run).
   */
  finishRun(runId: number, result: FinishRunInput): RunFieldWarning[] {
    const run = this.run?.id === runId ? this.run : undefined;
    const fresh = this.store.finishRun(runId, {
      ...result,
      duplicates: result.duplicates ?? run?.duplicates ?? 0,
      rejectedRecords: run?.rejected ?? [],
      fieldWarnings: run?.schemaDrift.counted() ?? [],
    });
    if (run !== undefined) this.run = undefined;
    return fresh;
  }

  private openLedger(runId: number): { run: OpenRun; ledger: Ledger } {
    const run = this.run;
    if (run?.id !== runId) throw new Error(`sync run ${runId} is not the run staged on this writer (${run?.id ?? 'none'})`);
    if (run.ledger === undefined) throw new Error(`sync run ${runId} is already published`);
    return { run, ledger: run.ledger };
  }

  /**
   * Active users at the start not listed so far. The ledger holds
   * fingerprints, not user_ids, so the candidates are read back from the
   * mirror with their content, deleted rows included: one deleted online
   * since the start is still a candidate (the deletion skips it, the check
   * may sample it).
   */
  private *unseenActiveIds(ledger: Ledger): Generator<string> {
    for (const [userId, hash] of this.store.allUsers()) if (ledger.isUnseenActive(userId, hash)) yield userId;
  }
}

/** A uniform sample of up to `k` items, in one pass (Algorithm R). */
function reservoirSample<T>(items: Iterable<T>, k: number): T[] {
  const sample: T[] = [];
  if (k === 0) return sample;
  let n = 0;
  for (const item of items) {
    n++;
    if (sample.length < k) sample.push(item);
    else {
      const j = Math.floor(Math.random() * n);
      if (j < k) sample[j] = item;
    }
  }
  return sample;
}

function stringField(raw: unknown, key: string): string | undefined {
  if (!isRecord(raw)) return undefined;
  const value = raw[key];
  return typeof value === 'string' ? value : undefined;
}

/** A RunWriter over a SQLite mirror: what the daemon and the CLI use. */
export function sqliteRunWriter(db: Db, clock?: () => Date, options: Omit<SqliteMirrorStoreOptions, 'clock'> = {}): RunWriter {
  return new RunWriter(new SqliteMirrorStore(db, { ...options, ...(clock === undefined ? {} : { clock }) }), clock);
}
