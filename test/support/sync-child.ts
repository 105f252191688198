/**
 * Runs the daemon's sync process (the built src/sync/child-main.js) once,
 * through src/sync/child-process.ts as the daemon does, with `env` added
 * to this process's environment, which the child inherits as it does the
 * daemon's. Needs `npm run build` first.
 */
import { join } from 'node:path';
import type { LeasedOutcome } from '../../db/sync-lease.js';
import { syncInChildProcess } from '../../src/sync/child-process.js';
import type { SyncSummary } from '../../src/sync/run-summary.js';
import { ROOT } from './mirror-fixtures.js';

export async function runDaemonSyncChild(env: Record<string, string>, unset: string[] = []): Promise<LeasedOutcome<SyncSummary>> {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  for (const k of unset) delete process.env[k];
  try {
    const run = syncInChildProcess({ childMain: join(ROOT, 'dist/src/sync/child-main.js') });
    return await run(new AbortController().signal, { reason: 'test', tick: new Date().toISOString() });
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}
