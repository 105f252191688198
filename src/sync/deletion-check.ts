/**
 * Asks the service about the users a sweep would delete, before it deletes
 * them. Counts cannot catch every shift of an offset listing: a user deleted
 * behind the cursor while another is added at the end moves one user past
 * the cursor unseen, yet `total`, the distinct count and the duplicate count
 * all still agree. Resolving the candidates by client_user_id catches it:
 * a deleted user is gone (404, or its client_user_id now names another
 * user_id); a skipped one is still there.
 *
 * The check stops at the first candidate that is still there or that cannot
 * be checked: either one already refuses the sweep.
 */
import type { ResolveResult } from '../service/client.js';
import type { DirectorySource } from './directory-source.js';
import { callWithRetries, type RetryOptions } from './retrying-call.js';

export interface DeletionCandidate {
  user_id: string;
  client_user_id: string;
}

export interface DeletionCheck {
  checked: number;
  /** Candidates the service still lists: the scan skipped them. */
  stillThere: number;
  /** Candidates whose resolve failed after retries. */
  unverifiable: number;
}

/** Pure: whether the resolve answer shows the candidate still exists upstream. */
export function stillExists(candidate: DeletionCandidate, result: ResolveResult): boolean {
  return result.found && result.user.user_id.toLowerCase() === candidate.user_id.toLowerCase();
}

export async function checkDeletions(
  source: DirectorySource,
  candidates: readonly DeletionCandidate[],
  options: { concurrency: number; retry: RetryOptions },
): Promise<DeletionCheck> {
  const result: DeletionCheck = { checked: 0, stillThere: 0, unverifiable: 0 };
  let next = 0;
  const settled = () => result.stillThere > 0 || result.unverifiable > 0;
  const worker = async (): Promise<void> => {
    while (next < candidates.length && !settled()) {
      const candidate = candidates[next++];
      if (candidate === undefined) break;
      let answer: ResolveResult;
      try {
        answer = await callWithRetries('resolve', (signal) => source.resolveUser(candidate.client_user_id, signal), options.retry);
      } catch {
        options.retry.signal?.throwIfAborted();
        result.unverifiable++;
        continue;
      }
      result.checked++;
      if (stillExists(candidate, answer)) result.stillThere++;
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, () => worker()));
  options.retry.signal?.throwIfAborted();
  return result;
}
