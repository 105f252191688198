/**
 * What a finished scan may do about deletions. Pure.
 *
 * The service has no deletion events, and an offset listing of a directory
 * that changes while it is read skips and repeats users. So a user missing
 * from the scan is only a *candidate*: it is deleted only once the service
 * confirms it (deletion-check.ts). That makes growth, shrinkage and shifting
 * of the listing harmless, and leaves two reasons to hold deletions back:
 *
 * - `incomplete`: pages failed after their retries. Every user on a lost page
 *   would be a candidate, and checking hundreds of live users one by one
 *   against a service that is already failing would only add load; the next
 *   run reads those pages again.
 * - `mass-delete`: more candidates than SYNC_MAX_DELETE_RATIO of the mirror.
 *   A real mass deletion is rare enough to want a human (a wrong team key
 *   looks exactly like one), so nothing is checked and nothing deleted.
 *
 * Otherwise up to `maxVerify` candidates are checked this run; the rest stay
 * active and are candidates again next run (`deferred`).
 */

export interface ScanOutcome {
  /** Pages that still failed after all their attempts. */
  pageFailures: number;
  /** Active mirror users not seen in the scan. */
  candidates: number;
  /** Active mirror users before the run. */
  activeBefore: number;
  /** Largest share of `activeBefore` one run may delete, 0..1 (SYNC_MAX_DELETE_RATIO). */
  maxDeleteRatio: number;
  /** Most candidates one run checks upstream (SYNC_MAX_VERIFY). */
  maxVerify: number;
}

export type HoldKind = 'incomplete' | 'mass-delete';

export type DeletionPlan =
  | { verify: true; check: number; deferred: number }
  | { verify: false; kind: HoldKind; reason: string };

export function planDeletions(o: ScanOutcome): DeletionPlan {
  if (o.pageFailures > 0) {
    return hold('incomplete', `${o.pageFailures} page(s) failed; deletions are held back until a run reads every page`);
  }
  if (o.candidates > 0 && o.candidates > o.maxDeleteRatio * o.activeBefore) {
    const pct = o.activeBefore === 0 ? 100 : (100 * o.candidates) / o.activeBefore;
    return hold(
      'mass-delete',
      `${o.candidates} of ${o.activeBefore} active user(s) (${pct.toFixed(1)}%) are missing from the listing, ` +
        `above the limit of ${(100 * o.maxDeleteRatio).toFixed(1)}% (SYNC_MAX_DELETE_RATIO); nothing was deleted`,
    );
  }
  const check = Math.min(o.candidates, Math.max(0, Math.floor(o.maxVerify)));
  return { verify: true, check, deferred: o.candidates - check };
}

function hold(kind: HoldKind, reason: string): DeletionPlan {
  return { verify: false, kind, reason };
}
