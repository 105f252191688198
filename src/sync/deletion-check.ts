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
import type { ResolveResult } from '../service/client.js';
import type { DirectorySource } from './directory-source.js';
import { callWithRetries, refusalOf, type RetryOptions } from '../service/retry.js';

export interface DeletionCandidate {
  user_id: string;
  client_user_id: string;
}

export interface DeletionCheck {
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

export async function checkCandidates(
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
