/**
 * Whether a finished scan may mark unseen users as deleted. Pure.
 *
 * The service has no deletion events, so "not seen in the scan" is the only
 * evidence of a deletion, and it is only evidence when the scan saw the whole
 * directory exactly once. Everything that casts doubt on that refuses the
 * sweep; creates and updates are still true facts and are published anyway.
 *
 * `kind` tells the engine what to do next: `unverified` means "ask the
 * service about the candidates, then decide again" (see deletion-check.ts);
 * only `drift` is worth a re-scan (the directory moved under us; a second
 * pass may catch it still). A failed page or a rejected record will not fix
 * itself in the next few seconds, and a mass deletion needs a human.
 */
import type { DeletionCheck } from './deletion-check.js';

export interface ScanFacts {
  /** Pages that still failed after all their attempts. */
  pageFailures: number;
  /** `total` on the first page of the scan. */
  totalAtStart: number;
  /** `total` on the first page re-read after the scan; undefined when that read failed. */
  totalAtEnd: number | undefined;
  /** Records whose user_id had already been seen earlier in the same pass. */
  duplicates: number;
  /** Distinct users staged in the pass (valid records only). */
  distinctSeen: number;
  /** Records that failed validation and were set aside. */
  rejected: number;
  /** Active mirror users not seen in the pass: the would-be deletions. */
  unseenActive: number;
  /** Active mirror users before the run. */
  activeBefore: number;
  /** Largest share of `activeBefore` a single sweep may delete, 0..1. */
  maxDeleteRatio: number;
  /** The upstream check of the would-be deletions; undefined until it ran. */
  deletionCheck?: DeletionCheck;
}

export type RefusalKind = 'incomplete' | 'rejected' | 'drift' | 'mass-delete' | 'unverified';

export type SweepDecision = { sweep: true } | { sweep: false; kind: RefusalKind; reason: string };

export function decideSweep(f: ScanFacts): SweepDecision {
  if (f.pageFailures > 0) {
    return refuse('incomplete', `${f.pageFailures} page(s) failed after retries; the scan did not see every user`);
  }
  if (f.totalAtEnd === undefined) {
    return refuse('incomplete', 'could not re-read the first page after the scan to confirm the total');
  }
  if (f.rejected > 0) {
    return refuse('rejected', `${f.rejected} record(s) failed validation; their users cannot be told apart from deleted ones`);
  }
  if (f.totalAtEnd !== f.totalAtStart) {
    return refuse('drift', `total changed during the scan (${f.totalAtStart} -> ${f.totalAtEnd})`);
  }
  if (f.duplicates > 0) {
    return refuse('drift', `${f.duplicates} user(s) appeared on two pages: the listing shifted during the scan`);
  }
  if (f.distinctSeen !== f.totalAtStart) {
    return refuse('drift', `saw ${f.distinctSeen} distinct user(s) but the service reports ${f.totalAtStart}`);
  }
  if (f.unseenActive > 0 && f.unseenActive > f.maxDeleteRatio * f.activeBefore) {
    const pct = f.activeBefore === 0 ? 100 : (100 * f.unseenActive) / f.activeBefore;
    return refuse(
      'mass-delete',
      `would delete ${f.unseenActive} of ${f.activeBefore} active user(s) (${pct.toFixed(1)}%), ` +
        `above the limit of ${(100 * f.maxDeleteRatio).toFixed(1)}% (SYNC_MAX_DELETE_RATIO)`,
    );
  }
  if (f.unseenActive > 0) {
    const check = f.deletionCheck;
    if (check === undefined) return refuse('unverified', `${f.unseenActive} deletion candidate(s) not yet checked upstream`);
    if (check.stillThere > 0) {
      return refuse('drift', `${check.stillThere} user(s) missing from the scan still exist upstream: the listing shifted during the scan`);
    }
    if (check.unverifiable > 0) {
      return refuse('incomplete', `${check.unverifiable} deletion candidate(s) could not be checked upstream`);
    }
  }
  return { sweep: true };
}

function refuse(kind: RefusalKind, reason: string): SweepDecision {
  return { sweep: false, kind, reason };
}
