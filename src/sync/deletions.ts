/**
 * Deletions: what a finished scan may do about them (planDeletions, pure),
 * the upstream check of each candidate (checkCandidates, the I/O), and the
 * two put together for a run (settleCandidates: the plan applied to the
 * run's unseen users, with what became of each counted).
 *
 * The service has no deletion events, and an offset listing of a directory
 * that changes while it is read skips and repeats users. So a user missing
 * from the scan is only a *candidate*: it is deleted only once the service
 * confirms it (checkCandidates, below). That makes growth, shrinkage and shifting
 * of the listing harmless, and leaves these reasons to hold deletions back:
 *
 * - `incomplete`: pages failed after their retries. Every user on a lost page
 *   would be a candidate, and checking hundreds of live users one by one
 *   against a service that is already failing would only add load; the next
 *   run reads those pages again.
 * - `incomplete-listing`: every page was read, but the distinct users listed
 *   fall short of the listing's total by more than its movement explains,
 *   and reading again did not make up for it (./listing-check.ts): a listing
 *   that repeats pages or changes its order. Its missing users would be
 *   candidates for no reason but the listing's instability.
 * - `collapsed`: a page's `total` fell below the first page's by more than
 *   SYNC_MAX_DELETE_RATIO (e.g. 100,000 → 0 late in the scan). The plan
 *   stops at the first empty page, so such a scan reads only part of the
 *   directory and says "done"; the listing itself claims a mass deletion
 *   that its own first page denies. The run keeps its creates and updates
 *   (each record read is true) and goes `partial`; the next run reads the
 *   whole listing again.
 * - `mass-delete`: more candidates than SYNC_MAX_DELETE_RATIO of the mirror.
 *   A real mass deletion is rare enough to want a human (a wrong team key
 *   looks exactly like one), so nothing is checked and nothing deleted.
 *
 * Otherwise up to `maxVerify` candidates are checked this run; the rest stay
 * active and are candidates again next run (`deferred`).
 */
import { NO_CANDIDATES, type CandidateCounts } from '../../db/sync-runs.js';
import type { ResolveResult } from '../service/client.js';
import type { DirectorySource } from './source.js';
import type { RunWriter } from './run-writer.js';
import { callWithRetries, refusalOf, type RetryOptions } from '../service/retry.js';
import type { Logger } from 'pino';

export interface ScanOutcome {
  /** Pages that still failed after all their attempts. */
  pageFailures: number;
  /** Active mirror users not seen in the scan. */
  candidates: number;
  /** `total` on the first page, and the lowest any page reported. */
  totalAtStart: number;
  totalLowest: number;
  /** Active mirror users before the run. */
  activeBefore: number;
  /** Largest share of `activeBefore` one run may delete, 0..1 (SYNC_MAX_DELETE_RATIO). */
  maxDeleteRatio: number;
  /** Most candidates one run checks upstream (SYNC_MAX_VERIFY). */
  maxVerify: number;
  /** Set when the listing fell short of its total, re-reads included: the shortfall named (./listing-check.ts). */
  incompleteListing?: string | undefined;
}

type HoldKind = 'incomplete' | 'incomplete-listing' | 'collapsed' | 'mass-delete';

export type DeletionPlan = { verify: true; check: number; deferred: number } | { verify: false; kind: HoldKind; reason: string };

export function planDeletions(o: ScanOutcome): DeletionPlan {
  if (o.pageFailures > 0) {
    return hold('incomplete', `${o.pageFailures} page(s) failed; deletions are held back until a run reads every page`);
  }
  if (o.incompleteListing !== undefined) return hold('incomplete-listing', o.incompleteListing);
  if (o.totalAtStart - o.totalLowest > o.maxDeleteRatio * o.totalAtStart) {
    return hold(
      'collapsed',
      `the listing's total fell from ${o.totalAtStart} to ${o.totalLowest} during the scan, by more than ` +
        `${(100 * o.maxDeleteRatio).toFixed(1)}% (SYNC_MAX_DELETE_RATIO): the scan may have read only part of the directory; nothing was deleted`,
    );
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

/** A user the scan did not list: a deletion only once the service confirms it (checkCandidates). */
export interface DeletionCandidate {
  user_id: string;
  client_user_id: string;
}

interface DeletionCheck {
  /** user_ids the service confirmed gone. */
  gone: string[];
  /** Candidates still there: the listing skipped them. */
  alive: number;
  /** Candidates whose resolve failed after retries, or that were not reached once the service looked down. */
  unverified: number;
}

export type Verdict = 'gone' | 'alive';

/** Pure: what a resolve answer says about a candidate. */
export function verdictOf(candidate: DeletionCandidate, result: ResolveResult): Verdict {
  return result.found && result.user.user_id.toLowerCase() === candidate.user_id.toLowerCase() ? 'alive' : 'gone';
}

/**
 * Asks the service about the users a scan did not list, before any of them
 * is deleted: a deletion is a fact only when the service confirms it.
 * Resolving a candidate by client_user_id settles it:
 *
 * - 404, or the client_user_id now names another user_id: the user is gone;
 * - the same user_id: the user is alive and the listing skipped it (an
 *   offset listing shifts when users are deleted behind the cursor), so it
 *   is kept as it is; the next run's listing brings any change to it;
 * - the resolve still fails after its retries: not deleted, checked again on
 *   a later run;
 * - the key is refused (401/403): the check stops and the refusal is thrown,
 *   since no other check could succeed either.
 *
 * When `abandonAfter` checks in a row fail with none settled in between, the
 * service is taken to be down and the rest are left for a later run instead
 * of walking each through its full retry budget.
 */
async function checkCandidates(
  source: DirectorySource,
  candidates: readonly DeletionCandidate[],
  options: { concurrency: number; retry: RetryOptions; abandonAfter?: number },
): Promise<DeletionCheck> {
  const result: DeletionCheck = { gone: [], alive: 0, unverified: 0 };
  const abandonAfter = options.abandonAfter ?? Math.max(3, options.concurrency);
  let next = 0;
  let failureStreak = 0;
  let refused: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (next < candidates.length && failureStreak < abandonAfter && refused === undefined) {
      const candidate = candidates[next++];
      if (candidate === undefined) break;
      let answer: ResolveResult;
      try {
        answer = await callWithRetries('resolve', (signal) => source.resolveUser(candidate.client_user_id, signal), options.retry);
      } catch (error) {
        options.retry.signal?.throwIfAborted();
        if (refusalOf(error) !== undefined) {
          refused ??= { error };
          break;
        }
        result.unverified++;
        failureStreak++;
        continue;
      }
      failureStreak = 0;
      if (verdictOf(candidate, answer) === 'gone') result.gone.push(candidate.user_id);
      else result.alive++;
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, () => worker()));
  options.retry.signal?.throwIfAborted();
  if (refused !== undefined) throw refused.error;
  // Candidates never reached because the service looked down.
  result.unverified += candidates.length - next;
  return result;
}

/** Checks the candidates the plan allows, and counts what became of all of them. */
export async function settleCandidates(
  source: DirectorySource,
  writer: RunWriter,
  runId: number,
  plan: DeletionPlan,
  candidates: number,
  ctx: { concurrency: number; retry: RetryOptions; log: Logger },
): Promise<{ gone: string[]; counts: CandidateCounts }> {
  if (candidates === 0) return { gone: [], counts: NO_CANDIDATES };
  if (!plan.verify) {
    return { gone: [], counts: { ...NO_CANDIDATES, candidates, deferred: candidates } };
  }
  const picked = writer.pickUnseenActive(runId, plan.check);
  const check: DeletionCheck = await checkCandidates(source, picked, ctx);
  const counts: CandidateCounts = {
    candidates,
    confirmedGone: check.gone.length,
    stillThere: check.alive,
    unverified: check.unverified,
    deferred: plan.deferred,
  };
  const level = counts.unverified > 0 ? 'warn' : 'info';
  ctx.log[level]({ event: 'sync.deletion_check', ...counts }, 'checked the users missing from the listing upstream');
  return { gone: check.gone, counts };
}
