/**
 * A sync run's trace (docs/tracing.md): one `sync run` span,
 * a client span per list page (never per record: a page is 500 of them, and
 * the deletion checks' per-user requests carry none), the publish and the
 * checkpoint. Attributes are the run id, counts and the status: never a
 * user, a client_user_id or a key.
 *
 * The daemon's sync process continues the trace of the job that started it:
 * the daemon puts the carrier in its environment (SYNC_TRACE_CARRIER_ENV).
 * With tracing off (src/runtime/tracing.ts) each of these only runs its function.
 */
import { traceCarrier, withSpan, withSpanSync } from '../runtime/tracing.js';
import { HttpError } from '../service/errors.js';
import type { DirectorySource } from './source.js';
import type { SyncSummary } from './run-summary.js';

/** The child's environment variable holding the daemon's trace carrier (validated before use, ignored if bad). */
const SYNC_TRACE_CARRIER_ENV = 'USER_MIRROR_TRACE_CARRIER';

/** The environment a sync process gets from the daemon: the active trace's carrier, if any. */
export function syncTraceEnv(): Record<string, string> {
  const carrier = traceCarrier();
  return carrier === undefined ? {} : { [SYNC_TRACE_CARRIER_ENV]: carrier };
}

/** The whole run, lease to checkpoint; `run` reports its summary, whose counts go on the span. */
export function traceSyncRun<T>(run: (done: (summary: SyncSummary | undefined) => void) => Promise<T>): Promise<T> {
  return withSpan('sync run', { parent: process.env[SYNC_TRACE_CARRIER_ENV] }, (span) =>
    run((s) => {
      if (s === undefined) return;
      span.setAttributes({
        'user_mirror.run_id': s.runId,
        'user_mirror.status': s.status,
        'user_mirror.pages': s.pages,
        'user_mirror.page_failures': s.pageFailures,
        'user_mirror.users_seen': s.usersSeen,
        'user_mirror.created': s.created,
        'user_mirror.updated': s.updated,
        'user_mirror.deleted': s.deleted,
      });
    }),
  );
}

/** The source with a span per list page; resolves (deletion checks, one per user) pass through untraced. */
export function tracedPages(source: DirectorySource): DirectorySource {
  return {
    listUserRecords: (params, signal) =>
      withSpan(
        'GET page',
        { kind: 'client', attributes: { 'http.request.method': 'GET', 'user_mirror.page_offset': params.offset } },
        async (span) => {
          try {
            const page = await source.listUserRecords(params, signal);
            span.setAttributes({ 'user_mirror.records': page.spans.length });
            return page;
          } catch (err) {
            if (err instanceof HttpError) span.setAttributes({ 'http.response.status_code': err.status });
            throw err;
          }
        },
      ),
    resolveUser: (clientUserId, signal) => source.resolveUser(clientUserId, signal),
  };
}

/** The publish: one SQLite transaction, synchronous. */
export function tracePublish<T>(publish: () => T): T {
  return withSpanSync('sync publish', {}, publish);
}

/** The WAL checkpoint after a run. */
export function traceCheckpoint(checkpoint: () => void): void {
  withSpanSync('sync checkpoint', {}, checkpoint);
}
