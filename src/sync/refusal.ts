/**
 * A 401 or 403 from the service: the key itself is refused. Pure.
 *
 * Not retryable (retrying a revoked key only adds load), and not a page
 * failure either: every other page would be refused the same way, so the
 * run ends `failed` at once, with a message an operator can act on, instead
 * of `partial` with a generic "failed after retries".
 */
import { HttpError } from '../service/errors.js';

/** Why the service refused the key, or undefined when `err` is no refusal. */
export function refusalOf(err: unknown): string | undefined {
  if (!(err instanceof HttpError)) return undefined;
  const what = err.path.startsWith('/v2/user/resolve/') ? 'resolve users' : 'list users';
  if (err.status === 401) {
    return `the service refused the key (HTTP 401 when asked to ${what}): SERVICE_API_KEY is missing, wrong or revoked; not retried`;
  }
  if (err.status === 403) {
    return `the key may not ${what} (HTTP 403): check SERVICE_API_KEY's team and permissions; not retried`;
  }
  return undefined;
}
