/**
 * node-cron, loaded the first time it is asked for. The registry validates
 * SYNC_CRON with it, but only a command that reads SYNC_CRON (the daemon,
 * `status`) should pay for loading it: `sync --once` and `resolve` never do.
 * A zod refinement is synchronous, so this is a require of the package (its
 * CommonJS build, the same code as its ESM one), kept in one place so that a
 * process that needs node-cron loads one copy of it.
 */
import { createRequire } from 'node:module';
import type { NodeCron } from 'node-cron';

let loaded: NodeCron | undefined;

export function nodeCron(): NodeCron {
  loaded ??= (createRequire(import.meta.url)('node-cron') as { nodeCron: NodeCron }).nodeCron;
  return loaded;
}
